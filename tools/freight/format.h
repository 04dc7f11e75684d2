// Terminal helpers shared by the subcommands: the command's own formatting of durations, sizes and
// counts. Defined in format.cpp, not in main.cpp, so that the subcommands need nothing from the
// file that calls them.
#pragma once
#include <string>

namespace freight::cli {

// True when standard output is a terminal (progress bars then, one line per epoch otherwise).
bool stdout_is_tty();
// "1:02:03" / "2:05" / "42.1 s"
std::string format_duration(double seconds);
std::string format_bytes(double bytes);
std::string format_count(double n);  // 1.2k, 3.4M, 5.6G

}  // namespace freight::cli
