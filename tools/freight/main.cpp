// freight: train, evaluate, describe and benchmark networks on the CPU or a GPU.
#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>

#include "commands.h"
#include "freight/error.h"

namespace freight::cli {

bool stdout_is_tty() {
  return ::isatty(STDOUT_FILENO) == 1;
}

std::string format_duration(double s) {
  if (s < 60) return fmt::format("{:.1f} s", s);
  int64_t t = int64_t(std::lround(s));
  if (t < 3600) return fmt::format("{}:{:02}", t / 60, t % 60);
  return fmt::format("{}:{:02}:{:02}", t / 3600, (t / 60) % 60, t % 60);
}

std::string format_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) b /= 1024, ++u;
  return u == 0 ? fmt::format("{:.0f} B", b) : fmt::format("{:.1f} {}", b, units[u]);
}

std::string format_count(double n) {
  const char* units[] = {"", "k", "M", "G", "T", "P"};
  int u = 0;
  while (std::fabs(n) >= 1000 && u < 5) n /= 1000, ++u;
  return u == 0 ? fmt::format("{:.0f}", n) : fmt::format("{:.2f}{}", n, units[u]);
}

}  // namespace freight::cli

int main(int argc, char** argv) {
  CLI::App app{
      "Freight: train networks on the CPU or an NVIDIA GPU with one flag, and see where the time "
      "goes.\nRun `freight train` to train the default CNN on Fashion-MNIST."};
  app.set_help_all_flag("--help-all", "Show the help of every subcommand");
  app.require_subcommand(1);
  freight::cli::add_train(app);
  freight::cli::add_eval(app);
  freight::cli::add_summary(app);
  freight::cli::add_devices(app);
  freight::cli::add_bench(app);
  freight::cli::add_explain(app);
  freight::cli::add_plan(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and friends are "errors" with exit code 0: CLI11 prints them. A real parse error
    // (unknown flag, a value out of range) is reported like any other bad input: one line naming
    // the flag and the value, and exit 1, before any work. A CLI::RuntimeError is not a parse
    // error: a command throws it to exit quietly with its code (128 + signal after Ctrl-C).
    if (e.get_exit_code() == 0 || dynamic_cast<const CLI::RuntimeError*>(&e) != nullptr)
      return app.exit(e);
    const std::vector<CLI::App*> used = app.get_subcommands();
    fmt::print(stderr,
               "freight: error: {}\nRun 'freight {}--help' for the flags and their values.\n",
               e.what(), used.empty() ? std::string() : used.back()->get_name() + " ");
    return 1;
  } catch (const freight::Error& e) {
    std::fflush(stdout);
    fmt::print(stderr, "\nfreight: error: {}\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    fmt::print(stderr, "\nfreight: internal error: {}\n", e.what());
    return 2;
  }
  return 0;
}
