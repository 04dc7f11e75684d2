// The subcommands of `freight`, one file each.
#pragma once
#include <CLI/CLI.hpp>

namespace freight::cli {

void add_train(CLI::App& app);
void add_eval(CLI::App& app);
void add_summary(CLI::App& app);
void add_devices(CLI::App& app);
void add_bench(CLI::App& app);

// True when standard output is a terminal (progress bars then, one line per epoch otherwise).
bool stdout_is_tty();
// "1:02:03" / "2:05" / "42.1 s"
std::string format_duration(double seconds);
std::string format_bytes(double bytes);
std::string format_count(double n);  // 1.2k, 3.4M, 5.6G

}  // namespace freight::cli
