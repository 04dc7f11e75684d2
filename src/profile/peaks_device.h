// Device-specific peak measurements, one slot per device type like the kernels: the CPU one in
// src/profile/peaks_cpu.cpp, the CUDA one in src/backend/cuda/peaks.cu (registered only when the
// CUDA backend is built). Each fills the compute, memory, transfer and launch fields of
// DevicePeaks; measure_peaks() adds the rest (identity, framework per-op costs) and caches it.
#pragma once
#include <algorithm>
#include <vector>

#include "core/kernel.h"
#include "freight/peaks.h"

namespace freight::profile {

FREIGHT_KERNEL(measure_device_peaks, void(int index, DevicePeaks& peaks));

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

}  // namespace freight::profile
