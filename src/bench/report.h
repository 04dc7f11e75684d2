// Renders a `freight bench` document (what it writes as <name>.json; fields in
// bench/results/README.md) as Markdown, and its two plots through gnuplot. Everything shown is
// read from the document.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace freight::bench {

// The full report: the set-up (devices, versions, environment, load), the table of rows, the
// Freight-vs-PyTorch summary when PyTorch ran, and the notes (conventions, skipped rows).
std::string markdown_report(const nlohmann::json& doc);

// Writes <stem>-speedup.{dat,gp} and <stem>-throughput-latency.{dat,gp} into `dir` and runs
// gnuplot there, which writes a PNG and an SVG of each. Returns the names of the image files
// made; what could not be plotted, and why, is appended to `notes`.
std::vector<std::string> write_plots(const nlohmann::json& doc, const std::string& dir,
                                     const std::string& stem, std::vector<std::string>& notes);

// "1.23", "12.3", "123": three significant digits, no exponent for ordinary magnitudes.
std::string format_sig(double value);
std::string format_bytes(double bytes);  // "12.3 MiB"

}  // namespace freight::bench
