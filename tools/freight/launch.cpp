#include "launch.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "bench/subprocess.h"
#include "freight/dist.h"
#include "freight/error.h"

namespace freight::cli {

namespace {
std::vector<std::string> g_args;  // argv[1..]

std::string quoted(const std::string& a) {
  if (!a.empty() && a.find_first_of(" \t\"'\\$`") == std::string::npos) return a;
  std::string q = "'";
  for (char c : a) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}
}  // namespace

void set_program_args(int argc, char** argv) {
  g_args.assign(argv + 1, argv + argc);
}

std::string this_program() {
  std::vector<char> buf(4096);
  ssize_t n = readlink("/proc/self/exe", buf.data(), buf.size() - 1);
  FREIGHT_CHECK(n > 0, "--nproc: cannot find this program's path (/proc/self/exe)");
  return std::string(buf.data(), size_t(n));
}

std::vector<std::string> mpirun_command(int nproc, const std::string& mpirun,
                                        const std::string& program,
                                        const std::vector<std::string>& args, int cores,
                                        bool as_root) {
  std::vector<std::string> cmd{mpirun, "-np", std::to_string(nproc)};
  if (as_root) cmd.push_back("--allow-run-as-root");
  // OpenMPI binds each rank to one core by default at 2 ranks or fewer, to a socket above: give
  // each rank its share of the cores instead, or, with more ranks than cores, bind none (bound
  // ranks would share cores while others idle).
  int per_rank = cores / nproc;
  if (nproc > cores) {
    cmd.insert(cmd.end(), {"--oversubscribe", "--bind-to", "none"});
  } else if (per_rank >= 2) {
    cmd.insert(cmd.end(), {"--map-by", fmt::format("slot:PE={}", per_rank), "--bind-to", "core"});
  } else {
    cmd.insert(cmd.end(), {"--bind-to", "core"});
  }
  cmd.push_back(program);
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--nproc") {
      ++i;  // and its value
      continue;
    }
    if (a.rfind("--nproc=", 0) == 0) continue;
    cmd.push_back(a);
  }
  return cmd;
}

std::string find_mpirun(const std::string& flag) {
  FREIGHT_CHECK(dist::built_with_mpi(),
                fmt::format("{}: this Freight was built without MPI; install openmpi-bin and "
                            "libopenmpi-dev (scripts/setup) and rebuild",
                            flag));
  if (const char* m = std::getenv("FREIGHT_MPIRUN"); m && *m) return m;
  if (bench::program_in_path("mpirun")) return "mpirun";
  throw Error(
      fmt::format("{} starts the ranks with mpirun, which is not installed: install "
                  "openmpi-bin (or set FREIGHT_MPIRUN)",
                  flag));
}

std::vector<std::string> mpirun_command(int nproc, const std::string& mpirun,
                                        const std::string& program,
                                        const std::vector<std::string>& args) {
  int cores = int(std::thread::hardware_concurrency());
  return mpirun_command(nproc, mpirun, program, args, cores > 0 ? cores : 1, geteuid() == 0);
}

void run_under_mpirun_if_asked(int nproc) {
  if (dist::launched_by_mpi()) {
    const dist::WorldInfo& w = dist::world();
    FREIGHT_CHECK(nproc == 0 || nproc == w.size,
                  fmt::format("--nproc {} under mpirun with {} processes: leave out --nproc "
                              "(mpirun's -np sets the number of ranks)",
                              nproc, w.size));
    return;
  }
  if (nproc <= 1) return;
  std::string mpirun = find_mpirun(fmt::format("--nproc {}", nproc));
  std::vector<std::string> cmd = mpirun_command(nproc, mpirun, this_program(), g_args);
  std::string shown;
  for (const std::string& a : cmd) {
    if (!shown.empty()) shown += ' ';
    shown += quoted(a);  // (appended in two steps: GCC 12 warns falsely on " " + temporary)
  }
  fmt::print("freight: starting {} ranks: {}\n", nproc, shown);
  std::fflush(stdout);
  std::vector<char*> argv;
  for (std::string& a : cmd) argv.push_back(a.data());
  argv.push_back(nullptr);
  execvp(argv[0], argv.data());
  throw Error(
      fmt::format("--nproc {}: could not start {}: {}", nproc, mpirun, std::strerror(errno)));
}

}  // namespace freight::cli
