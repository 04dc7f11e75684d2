// The process-wide thread-split thresholds (freight/parallel_thresholds.h). Kept in libfreight,
// not in the CPU kernel modules, so that there is one state whatever module is loaded; the kernels
// read them through parallel_thresholds() (one atomic load each).
#include "freight/parallel_thresholds.h"

#include <fmt/format.h>

#include <atomic>
#include <cmath>

#include "freight/error.h"

namespace freight {
namespace {
std::atomic<double> g_conv{ParallelThresholds{}.conv_macs_per_thread};
std::atomic<double> g_gemm{ParallelThresholds{}.gemm_macs_per_thread};
std::atomic<int64_t> g_elementwise{ParallelThresholds{}.elementwise_per_thread};

std::string macs(double v) {
  return v >= 1e6 ? fmt::format("{:.3g}M", v / 1e6) : fmt::format("{:.3g}k", v / 1e3);
}
}  // namespace

std::string ParallelThresholds::describe() const {
  return fmt::format("conv {} MACs, GEMM {}, elementwise {} elements (per thread)",
                     macs(conv_macs_per_thread),
                     gemm_macs_per_thread > 0 ? macs(gemm_macs_per_thread) + " MACs"
                                              : std::string("OpenBLAS's rule"),
                     elementwise_per_thread);
}

ParallelThresholds parallel_thresholds() {
  ParallelThresholds t;
  t.conv_macs_per_thread = g_conv.load(std::memory_order_relaxed);
  t.gemm_macs_per_thread = g_gemm.load(std::memory_order_relaxed);
  t.elementwise_per_thread = g_elementwise.load(std::memory_order_relaxed);
  return t;
}

void set_parallel_thresholds(const ParallelThresholds& t) {
  auto ok = [](double v) { return std::isfinite(v) && v >= 0; };
  FREIGHT_CHECK(
      ok(t.conv_macs_per_thread) && ok(t.gemm_macs_per_thread) && t.elementwise_per_thread >= 1,
      fmt::format("parallel thresholds must be finite and not negative (elementwise at "
                  "least 1): conv {}, GEMM {}, elementwise {}",
                  t.conv_macs_per_thread, t.gemm_macs_per_thread, t.elementwise_per_thread));
  g_conv = t.conv_macs_per_thread;
  g_gemm = t.gemm_macs_per_thread;
  g_elementwise = t.elementwise_per_thread;
}

}  // namespace freight
