// The processes of a data-parallel job. `mpirun -np N freight train ...` (or `freight train
// --nproc N`, which starts mpirun) runs N ranks of one program; each trains on its share of every
// global batch and the gradients are summed over the ranks before each optimizer step
// (docs/distributed.md). Outside mpirun, or in a build without MPI, the world is one process
// and nothing here communicates. No MPI type appears in this header.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "freight/device.h"

namespace freight::dist {

struct WorldInfo {
  int rank = 0, size = 1;              // this process and the job's processes
  int local_rank = 0, local_size = 1;  // the same among the processes of this host
  std::string host;
  bool mpi = false;  // MPI is initialised (launched by mpirun in a build with MPI)
};

// The world of this process. The first call initialises MPI when the process was launched by
// mpirun; launched by mpirun with more than one process in a build without MPI is an error
// (every rank would train alone).
const WorldInfo& world();

bool built_with_mpi();
// mpirun (OpenMPI, or a PMI launcher) started this process: read from the environment only.
bool launched_by_mpi();

// How long a collective waits for the other ranks before the job is aborted with a message
// naming it: FREIGHT_DIST_TIMEOUT (seconds) or 600 s, unless set here (--dist-timeout).
double timeout_seconds();
void set_timeout_seconds(double seconds);

// Ends the whole job: prints "freight: error on rank r of N (host): message" to stderr, then
// MPI_Abort (every other rank is killed by mpirun). Outside a job of several ranks, exits.
[[noreturn]] void abort_job(int code, const std::string& message);

// Whether `mine` holds on every rank (a collective: every rank must call it). A decision that
// leads to collectives must be the same on every rank, or the job hangs.
bool on_every_rank(bool mine, const std::string& what);

// CPU threads for each rank when none were asked for: the cores this process may run on (its
// binding) when mpirun bound it, else the host's cores shared among its ranks.
int default_threads();

// One size of measure_all_reduce: the median time of an in-place float32 sum of `bytes` over
// the ranks (each repeat's time is the slowest rank's), and the bus bandwidth it means for a
// ring all-reduce, 2(p − 1)/p · bytes / seconds (what each rank's link carries).
struct AllReduceTiming {
  int64_t bytes = 0;
  double seconds = 0;
  double bus_bytes_per_second = 0;
};
// Times sums over the ranks at each size, after a warm-up, with a fixed number of repeats (so
// every rank makes the same calls). A collective: every rank must call it. In a world of one it
// returns nothing. On the CPU the sums are MPI's over host memory; with a GPU `device` (each
// rank its own) NCCL's over device memory, each timed until the device has finished it.
std::vector<AllReduceTiming> measure_all_reduce(const std::vector<int64_t>& sizes_bytes,
                                                Device device = Device::cpu());

}  // namespace freight::dist
