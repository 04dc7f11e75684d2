// Device-specific peak measurements, one slot per device type like the kernels: the CPU one in
// src/profile/peaks_cpu.cpp, the CUDA one in src/backend/cuda/peaks.cu (registered only when the
// CUDA backend is built). Each fills the compute, memory, transfer and launch fields of
// DevicePeaks; measure_peaks() adds the rest (identity, framework per-op costs) and caches it.
#pragma once
#include <time.h>
#include <algorithm>

#include <chrono>
#include <vector>

#include "core/kernel.h"
#include "freight/peaks.h"

namespace freight::profile {

FREIGHT_KERNEL(measure_device_peaks, void(int index, DevicePeaks& peaks));

// Fills peaks.efficiency from reference layers run through the public API (calibrate.cpp);
// needs the other fields measured first.
void measure_efficiency(Device device, DevicePeaks& peaks);

// The median of samples (the mean of the middle two for an even count); 0 when empty.
inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// (max − min) / median: the relative spread of repeated timings.
inline double spread(const std::vector<double>& v) {
  if (v.empty()) return 0;
  double m = median(v);
  auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  return m > 0 ? (*hi - *lo) / m : 0;
}

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

// Fits t(F) = t0 + F / peak to (flops, seconds) pairs with the peak fixed: t0 is the median of
// the residuals, never negative.
inline double fit_overhead(const std::vector<double>& flops, const std::vector<double>& seconds,
                           double peak) {
  std::vector<double> r;
  for (size_t i = 0; i < flops.size(); ++i) r.push_back(seconds[i] - flops[i] / peak);
  return std::max(0.0, median(r));
}

}  // namespace freight::profile
