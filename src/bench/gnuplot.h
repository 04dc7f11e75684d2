// Writing user-given text (titles, labels, model names, file names) into gnuplot scripts and
// data files so that gnuplot reads it back as text and never runs anything, and the argument
// vector that runs a script without a shell.
//
// What gnuplot would otherwise run: `backquotes` are replaced by a shell command's output on
// any command line and inside double-quoted strings; @name substitutes a string variable into
// the command line; a newline ends a comment or a command, so the rest of the text becomes a
// command (`system "..."`); a file name '<cmd' is read from a pipe and an output '|cmd' is
// written to one; '-' is stdin, '+' a pseudo-file, and an argument '-x' an option.
//
// Why double quotes with escapes rather than single quotes (inside which nothing is expanded
// and '' stands for one quote): gnuplot 5.4's scanner takes '' for a quote only after a
// character that is not a quote, so 'it''s' reads back but '''' and 'a'''' b' end the string
// early and leave the rest on the command line. Inside double quotes the escapes \\, \" and
// octal \NNN always work, and a backquote or an @ written as \140 or \100 is not on the command
// line for gnuplot to expand.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace freight::bench {

// `text` as a gnuplot string literal that gnuplot reads back as `text`, expanding nothing, with
// each control character (newline, carriage return, tab, ...) replaced by a space: usable
// anywhere a string is (titles, labels, arrays, file names) and in comments.
std::string gnuplot_string(std::string_view text);

// A path that gnuplot (and its command line) takes as a plain file name: a relative path gets
// "./" in front, so '<cmd', '|cmd', '-', '+' and '-x' name files. Unquoted; quote it with
// gnuplot_string() inside a script.
std::string gnuplot_path(const std::string& path);

// gnuplot_string(gnuplot_path(path)): a file name inside a script (set output, plot, stats).
std::string gnuplot_file(const std::string& path);

// Whether a script can name `path` exactly: not when it holds a control character, which
// gnuplot_string replaces. Callers refuse such a name up front, naming the flag it came from.
bool gnuplot_can_name(std::string_view path);

// `text` as one double-quoted field of a whitespace-separated data file (a `with labels`
// column; data files are not command lines, nothing is expanded in them): control characters
// become spaces and '"' (which would end the field) becomes '\'', so the field stays on its
// row and in its column.
std::string gnuplot_data_label(std::string_view text);

// `text` as one bare word of a data file or of a gnuplot word list ("a b c"): whitespace,
// control characters and quotes become '_'; "" becomes "_".
std::string gnuplot_data_word(std::string_view text);

// The argument vector that runs gnuplot on `script` (no shell; see run_command).
std::vector<std::string> gnuplot_command(const std::string& script);

}  // namespace freight::bench
