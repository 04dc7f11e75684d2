// How much work a CPU kernel needs before it splits over threads. A parallel region costs a few
// microseconds to start and join, and the threads it wakes pull their share of the operands over
// from the calling core's caches; below some amount of work per thread one thread is faster. That
// amount differs between machines (an AMD EPYC's cores, whose caches are far apart, needed several
// times the work an Intel Xeon's did), so `freight devices --measure` times each kind of kernel on
// one thread and on all of them over a ladder of sizes and caches where splitting starts to pay
// (DevicePeaks::parallel). The freight command applies the cached figures when it starts; a
// program using the library calls use_cached_parallel_thresholds() or sets its own.
#pragma once
#include <cstdint>
#include <string>

namespace freight {

// The defaults, for a machine that has not been measured, are what the Intel Xeon development
// machine measured (the convolution's at its highest over repeated measurements): safe there,
// and far better than no rule on the AMD EPYC, whose batch-1 steps were up to 2.7 times slower
// on both cores when OpenBLAS threaded every small GEMM.
struct ParallelThresholds {
  // Multiply-adds each thread must get before a convolution pass splits (the pass runs on
  // floor(work / this) threads at most).
  double conv_macs_per_thread = 1.2e6;
  // Multiply-adds per thread below which a GEMM runs on fewer threads than OpenBLAS's pool
  // (floor(work / this) of them); 0 leaves every GEMM to OpenBLAS's own rule.
  double gemm_macs_per_thread = 524288;
  // Elements each thread of an elementwise loop (add, ReLU, the optimizer's update) must get.
  int64_t elementwise_per_thread = 32768;

  bool operator==(const ParallelThresholds&) const = default;
  std::string describe() const;  // "conv 1.2M MACs, GEMM 524k MACs, elementwise 32768 ..."
};

// The thresholds in force (process-wide), and setting them; set_... checks that each is finite
// and not negative (elementwise at least 1).
ParallelThresholds parallel_thresholds();
void set_parallel_thresholds(const ParallelThresholds& t);

// Applies the thresholds cached for this machine and build by `freight devices --measure`, if
// any and if they were measured with the cores free (DevicePeaks::parallel_contended); returns
// whether it applied them. Never measures.
bool use_cached_parallel_thresholds();

}  // namespace freight
