// The device-specific half of `freight devices --measure` (freight/peaks.h): one kernel slot per
// device type that times the hardware itself (GEMM rates, memory and bus bandwidths, launch
// latency) and fills a HardwarePeaks. The CUDA entry is registered by the CUDA backend
// (src/backend/cuda/peaks.cu, which needs nvcc and cuBLAS), the CPU entry by the profile
// (src/profile/peaks_cpu.cpp). Declared in the core so that a backend depends on nothing above
// the engine: the profile calls the slot and adds the rest (identity, per-op costs, cache).
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/kernel.h"

namespace freight {

// The fields mirror those of DevicePeaks (freight/peaks.h), where each is documented; a
// measurement leaves the ones its device lacks at 0.
struct HardwarePeaks {
  int threads = 0;  // CPU threads used (CPU); 0 on a GPU
  double fp32_flops = 0, tf32_flops = 0, bf16_flops = 0;
  int64_t gemm_n = 0;
  double gemm_overhead_s = 0;
  double spread = 0;  // (slowest − fastest) / median of the large GEMM's runs
  double mem_bandwidth = 0;
  struct Level {
    double bytes = 0, bandwidth = 0;
  };
  std::vector<Level> levels;  // ascending working sets; the last is mem_bandwidth
  double h2d_pinned = 0, h2d_pageable = 0, d2h_pinned = 0, d2h_pageable = 0;
  double launch_s = 0;  // GPU: one empty kernel launch
};

namespace kernels {
FREIGHT_KERNEL(measure_hardware_peaks, void(int index, HardwarePeaks& peaks));
}  // namespace kernels

// Statistics of repeated timings, shared by the measurements of every device.
namespace timing_stats {

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

// Fits t(F) = t0 + F / peak to (flops, seconds) pairs with the peak fixed: t0 is the median of
// the residuals, never negative.
inline double fit_overhead(const std::vector<double>& flops, const std::vector<double>& seconds,
                           double peak) {
  std::vector<double> r;
  for (size_t i = 0; i < flops.size(); ++i) r.push_back(seconds[i] - flops[i] / peak);
  return std::max(0.0, median(r));
}

}  // namespace timing_stats
}  // namespace freight
