// Helpers of the peak measurements (freight/peaks.h). The device-specific measurements fill a
// HardwarePeaks through the slot kernels::measure_hardware_peaks (src/core/hardware_peaks.h): the
// CPU one in src/profile/peaks_cpu.cpp, the CUDA one in src/backend/cuda/peaks.cu (registered
// only when the CUDA backend is built); measure_peaks() copies them into DevicePeaks, adds the
// rest (identity, framework per-op costs) and caches it.
#pragma once
#include <time.h>

#include <chrono>
#include <vector>

#include "core/hardware_peaks.h"
#include "freight/parallel_thresholds.h"
#include "freight/peaks.h"

namespace freight::profile {

// Fills peaks.efficiency from reference layers run through the public API (calibrate.cpp);
// needs the other fields measured first.
void measure_efficiency(Device device, DevicePeaks& peaks);

// Where splitting CPU kernels over threads starts to pay on this machine, measured on all threads
// (parallel_calibration.cpp); the defaults with one thread. Leaves the thresholds in force as
// they were. `contended`: no round of one of the ladders ran with every core free (another
// process held one throughout), so the figures are the neighbour's as much as the machine's.
ParallelThresholds measure_parallel_thresholds(bool& contended);

// Replaces the probe that tells whether another process holds a core (parallel_calibration.cpp:
// all threads' time over one thread's on the same arithmetic; 1.3 or more is busy), for tests
// that need a contended measurement; nullptr restores it.
void set_core_wait_probe(double (*probe)(int threads));

// Each rung's fastest time over the rounds of a ladder (`rounds[r][rung]`) whose grade (`grade[r]`:
// how well the cores served that round, parallel_calibration.cpp) is at least the best one that
// two rounds reached; over all of them when fewer than two rounds ran.
std::vector<double> fastest_rounds(const std::vector<std::vector<double>>& rounds,
                                   const std::vector<int>& grade);

using timing_stats::fit_overhead;
using timing_stats::median;
using timing_stats::spread;

// CPU time the calling thread has used, in seconds.
inline double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// Seconds per call of `fn`: one warm-up call, then the median of `runs` timed calls. With
// `cpu_clock` (CPU measurements) the clock is the calling thread's CPU time rather than the wall:
// on a busy machine other processes preempt a run, which stretches its wall time but not the CPU
// time it uses, and a parallel region splits its work evenly over the threads, so the calling
// thread's share takes as long as the whole region would on an idle machine. (Threads waiting
// at a barrier must sleep for this, OMP_WAIT_POLICY=PASSIVE; spinning ones only make the figures
// conservative.) Every timed call lands in `all` when given.
template <class Fn>
double median_seconds(bool cpu_clock, int runs, Fn&& fn, std::vector<double>* all = nullptr) {
  using Clock = std::chrono::steady_clock;
  fn();
  std::vector<double> t;
  for (int i = 0; i < runs; ++i) {
    if (cpu_clock) {
      double c0 = thread_cpu_seconds();
      fn();
      t.push_back(thread_cpu_seconds() - c0);
    } else {
      auto t0 = Clock::now();
      fn();
      t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    }
  }
  if (all) *all = t;
  return median(t);
}

}  // namespace freight::profile
