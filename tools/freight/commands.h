// The subcommands of `freight`, one file each; main.cpp adds them to the command line. (The
// helpers they share are in format.h.)
#pragma once
#include <CLI/CLI.hpp>

namespace freight::cli {

void add_train(CLI::App& app);
void add_eval(CLI::App& app);
void add_summary(CLI::App& app);
void add_devices(CLI::App& app);
void add_bench(CLI::App& app);
void add_explain(CLI::App& app);
void add_plan(CLI::App& app);

}  // namespace freight::cli
