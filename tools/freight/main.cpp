// freight: train, evaluate, describe and benchmark networks on the CPU or a GPU.
#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "commands.h"
#include "flags.h"
#include "freight/dist.h"
#include "freight/error.h"
#include "freight/parallel_thresholds.h"
#include "launch.h"
#include "openmp_wait.h"

namespace {
// One rank of a data-parallel job that fails ends the whole job with its message, at once:
// the others would otherwise wait for it in their next collective.
int fail(int code, const std::string& message) {
  if (freight::dist::launched_by_mpi() && freight::dist::world().size > 1)
    freight::dist::abort_job(code, message);  // "freight: error on rank 1 of 2 (host): ..."
  std::fflush(stdout);
  fmt::print(stderr, "\nfreight: {}{}\n", code == 1 ? "error: " : "", message);
  return code;
}
}  // namespace

int main(int argc, char** argv) {
  freight::cli::settle_openmp_wait(argv);
  CLI::App app{
      "Freight: train networks on the CPU or an NVIDIA GPU with one flag, and see where the time "
      "goes.\nRun `freight train` to train the default CNN on Fashion-MNIST."};
  app.set_help_all_flag("--help-all", "Show the help of every subcommand");
  app.require_subcommand(1);
  freight::cli::set_program_args(argc, argv);
  // Under mpirun with several ranks only `train` (and `devices --measure`, which times the link)
  // work together; any other command would run N times, each printing the same report.
  if (argc > 1 && freight::dist::launched_by_mpi()) {
    const std::string sub = argv[1];
    const char* n = std::getenv("OMPI_COMM_WORLD_SIZE");
    if (n && std::atoi(n) > 1 && sub != "train" && sub != "devices" && sub[0] != '-') {
      if (std::getenv("OMPI_COMM_WORLD_RANK") &&
          std::atoi(std::getenv("OMPI_COMM_WORLD_RANK")) == 0)
        fmt::print(stderr,
                   "freight: error: `freight {}` runs in one process: run it without mpirun "
                   "(under mpirun, `freight train` trains data-parallel and `freight devices "
                   "--measure` times the link between the ranks)\n",
                   sub);
      return 1;
    }
  }
  // The thread split measured on this machine by `freight devices --measure`, when cached. A
  // corrupt cache is left to the commands that read the peaks to report.
  try {
    freight::use_cached_parallel_thresholds();
  } catch (const freight::Error&) {
  }
  freight::cli::add_train(app);
  freight::cli::add_eval(app);
  freight::cli::add_summary(app);
  freight::cli::add_devices(app);
  freight::cli::add_bench(app);
  freight::cli::add_explain(app);
  freight::cli::add_plan(app);
  freight::cli::refuse_empty_values(app);
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
    return fail(1, e.what());
  } catch (const std::exception& e) {
    return fail(2, fmt::format("internal error: {}", e.what()));
  }
  return 0;
}
