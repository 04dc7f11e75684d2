// The world of this process: MPI initialised on first use when mpirun launched it.
//
// MPI_Init runs only under mpirun: a singleton MPI_Init (a program started by hand) is slow and
// noisy in containers, and a world of one needs no MPI. Only the training thread calls MPI (the
// loader's worker never does), so MPI_THREAD_FUNNELED is enough.
#include <fmt/format.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "freight/dist.h"
#include "freight/error.h"

#if FREIGHT_WITH_MPI
#include <mpi.h>
#endif

namespace freight::dist {

namespace {

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

// The job's size as the launcher tells it (0: not launched by one).
int launcher_size() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"}) {
    int n = env_int(name, 0);
    if (n > 0) return n;
  }
  return 0;
}

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "?";
  return buf;
}

double g_timeout = -1;

#if FREIGHT_WITH_MPI
void finalize_mpi() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}
#endif

WorldInfo make_world() {
  WorldInfo w;
  w.host = host_name();
  int launched = launcher_size();
#if FREIGHT_WITH_MPI
  if (launched > 0) {
    // OpenMPI's nonblocking all-reduce picks a binomial tree by default; the ring (bandwidth-
    // optimal: each rank sends 2(p - 1)/p of the buffer, the cost `freight plan` models) was twice
    // as fast from 64 KiB up on one host. A default only: the user's environment wins.
    setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "1", 0);
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
    std::atexit(finalize_mpi);
    // A failed collective aborts the job with MPI's message instead of returning an error code
    // every call site would have to check.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    MPI_Comm_rank(MPI_COMM_WORLD, &w.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &w.size);
    MPI_Comm local;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, w.rank, MPI_INFO_NULL, &local);
    MPI_Comm_rank(local, &w.local_rank);
    MPI_Comm_size(local, &w.local_size);
    MPI_Comm_free(&local);
    char name[MPI_MAX_PROCESSOR_NAME] = {};
    int len = 0;
    MPI_Get_processor_name(name, &len);
    w.host = std::string(name, size_t(len));
    w.mpi = true;
  }
#else
  if (launched > 1)
    throw Error(fmt::format(
        "launched by mpirun as one of {} processes, but this Freight was built without MPI: "
        "every rank would train alone. Install libopenmpi-dev (scripts/setup) and reconfigure",
        launched));
#endif
  return w;
}

}  // namespace

bool built_with_mpi() {
  return FREIGHT_WITH_MPI != 0;
}

bool launched_by_mpi() {
  return launcher_size() > 0;
}

const WorldInfo& world() {
  static const WorldInfo w = make_world();
  return w;
}

double timeout_seconds() {
  if (g_timeout > 0) return g_timeout;
  const char* v = std::getenv("FREIGHT_DIST_TIMEOUT");
  if (v && *v) {
    char* end = nullptr;
    double s = std::strtod(v, &end);
    if (end != v && s > 0) return s;
  }
  return 600;
}

void set_timeout_seconds(double seconds) {
  FREIGHT_CHECK(seconds > 0, fmt::format("--dist-timeout must be positive (got {})", seconds));
  g_timeout = seconds;
}

void abort_job(int code, const std::string& message) {
  const WorldInfo& w = world();
  std::fflush(stdout);
  if (w.size > 1)
    std::fprintf(stderr, "\nfreight: error on rank %d of %d (%s): %s\n", w.rank, w.size,
                 w.host.c_str(), message.c_str());
  else
    std::fprintf(stderr, "\nfreight: error: %s\n", message.c_str());
  std::fflush(stderr);
#if FREIGHT_WITH_MPI
  if (w.mpi) MPI_Abort(MPI_COMM_WORLD, code);
#endif
  std::_Exit(code);
}

int default_threads() {
  const WorldInfo& w = world();
  int hw = int(std::thread::hardware_concurrency());
  if (hw <= 0) hw = 1;
  cpu_set_t set;
  CPU_ZERO(&set);
  int allowed = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : hw;
  if (allowed > 0 && allowed < hw) return allowed;  // bound by mpirun (or taskset): its cores
  return std::max(1, hw / std::max(1, w.local_size));
}

}  // namespace freight::dist
