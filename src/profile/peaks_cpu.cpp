// Peaks of the CPU: float32 GEMM through the engine's own GEMM kernel (OpenBLAS, all threads of
// the shared OpenMP pool) and memory bandwidth from a large parallel copy. Each figure is a
// median over repeats after a warm-up run.
#include <chrono>
#include <cmath>
#include <cstring>

#include "backend/cpu/parallel.h"
#include "freight/runtime.h"
#include "freight/tensor.h"
#include "ops/kernels/blas.h"
#include "profile/peaks_device.h"

namespace freight::profile {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Median seconds of one C = A·B of n x n floats, over `repeats` runs of `inner` calls each.
double gemm_seconds(int64_t n, int repeats, int inner, std::vector<double>* all = nullptr) {
  Tensor a = Tensor::uniform({n, n}, -1, 1), b = Tensor::uniform({n, n}, -1, 1);
  Tensor c = Tensor::empty({n, n});
  kernels::gemm(DeviceType::CPU, a, false, b, false, c, 1.0, 0.0);  // warm-up (and page-in)
  std::vector<double> t;
  for (int r = 0; r < repeats; ++r) {
    auto t0 = Clock::now();
    for (int i = 0; i < inner; ++i) kernels::gemm(DeviceType::CPU, a, false, b, false, c, 1.0, 0.0);
    t.push_back(since(t0) / inner);
  }
  if (all) *all = t;
  return median(t);
}

// Bytes/s of a parallel copy of `bytes` (reads plus writes), the threads splitting the buffer
// the way the engine's elementwise kernels do.
double copy_bandwidth(size_t bytes, int repeats) {
  std::vector<char> src(bytes, 1), dst(bytes, 0);  // touched here, so no page faults later
  auto copy = [&] {
    cpu::parallel_for(int64_t(bytes), 1 << 20, [&](int64_t b, int64_t e) {
      std::memcpy(dst.data() + b, src.data() + b, size_t(e - b));
    });
  };
  copy();
  std::vector<double> t;
  for (int r = 0; r < repeats; ++r) {
    auto t0 = Clock::now();
    copy();
    t.push_back(since(t0));
  }
  return 2.0 * double(bytes) / median(t);
}

void measure_cpu(int, DevicePeaks& p) {
  p.threads = num_threads();
  // A large square GEMM: 2048³ is 17 GFLOP, about 0.1 s on two AVX-512 cores, large enough that
  // packing and thread start-up are noise.
  p.gemm_n = 2048;
  std::vector<double> runs;
  double t = gemm_seconds(p.gemm_n, 5, 1, &runs);
  p.fp32_flops = 2.0 * std::pow(double(p.gemm_n), 3) / t;
  p.spread = spread(runs);
  // Small GEMMs for the overhead term of the GEMM time model.
  std::vector<double> f, s;
  for (int64_t n : {32, 48, 64, 96, 128, 192, 256, 384, 512}) {
    double fl = 2.0 * std::pow(double(n), 3);
    int inner = int(std::clamp(2e7 / fl, 1.0, 2000.0));
    f.push_back(fl);
    s.push_back(gemm_seconds(n, 5, inner));
  }
  p.gemm_overhead_s = fit_overhead(f, s, p.fp32_flops);
  // 256 MiB each way: far beyond any cache.
  p.mem_bandwidth = copy_bandwidth(size_t(256) << 20, 7);
}

}  // namespace

FREIGHT_REGISTER_KERNEL(measure_device_peaks, CPU, measure_cpu);

}  // namespace freight::profile
