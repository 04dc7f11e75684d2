// Peaks of the CPU: float32 GEMM through the engine's own GEMM kernel (OpenBLAS, all threads of
// the shared OpenMP pool), and bandwidth from parallel copies of growing working sets, from one
// that fits in the L2 caches to one far beyond any cache (the memory bandwidth). Each figure is a
// median of repeated runs timed by the measuring thread's CPU clock (median_seconds): on a shared
// machine other processes preempt runs, which stretches their wall time but not their CPU time.
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <string>

#include "backend/cpu/parallel.h"
#include "freight/runtime.h"
#include "freight/tensor.h"
#include "ops/kernels/blas.h"
#include "profile/peaks_device.h"

namespace freight::profile {
namespace {

// Seconds of one n x n x n float32 GEMM.
double gemm_seconds(int64_t n, int runs, std::vector<double>* all = nullptr) {
  Tensor a = Tensor::uniform({n, n}, -1, 1), b = Tensor::uniform({n, n}, -1, 1);
  Tensor c = Tensor::empty({n, n});
  // Small GEMMs are repeated inside one timed call, so the clock's resolution does not matter.
  int inner = int(std::clamp(1e7 / (2.0 * double(n) * double(n) * double(n)), 1.0, 1000.0));
  double t = median_seconds(
      true, runs,
      [&] {
        for (int i = 0; i < inner; ++i)
          kernels::gemm(DeviceType::CPU, a, false, b, false, c, 1.0, 0.0);
      },
      all);
  if (all)
    for (double& x : *all) x /= inner;
  return t / inner;
}

// Bytes/s of a parallel copy of `bytes` (reads plus writes), the threads splitting the buffer
// the way the engine's elementwise kernels do; `inner` copies per timed call.
double copy_bandwidth(size_t bytes, int inner, int runs) {
  std::vector<char> src(bytes, 1), dst(bytes, 0);  // touched here, so no page faults later
  double t = median_seconds(true, runs, [&] {
    for (int i = 0; i < inner; ++i)
      cpu::parallel_for(int64_t(bytes), 1 << 14, [&](int64_t b, int64_t e) {
        std::memcpy(dst.data() + b, src.data() + b, size_t(e - b));
      });
  });
  return 2.0 * double(bytes) * inner / t;
}

// The L2 cache of one core (bytes), from sysfs; 1 MiB when unknown.
size_t l2_bytes_per_core() {
  for (int i = 0; i < 8; ++i) {
    std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
    std::ifstream level(dir + "level"), size(dir + "size");
    int lv = 0;
    std::string sz;
    if (!(level >> lv) || !(size >> sz) || lv != 2 || sz.empty()) continue;
    size_t v = std::stoul(sz);
    char unit = sz.back();
    return unit == 'K' ? v << 10 : unit == 'M' ? v << 20 : v;
  }
  return size_t(1) << 20;
}

void measure_cpu(int, HardwarePeaks& p) {
  p.threads = num_threads();
  // The best of three large square sizes: on a machine whose memory cannot feed the largest
  // GEMMs the middle size wins, and that is the rate a layer can hope for.
  p.fp32_flops = 0;
  for (int64_t n : {512, 1024, 2048}) {
    std::vector<double> runs;
    double t = gemm_seconds(n, n == 2048 ? 5 : 9, &runs);
    double rate = 2.0 * std::pow(double(n), 3) / t;
    if (rate > p.fp32_flops) {
      p.fp32_flops = rate;
      p.gemm_n = n;
      p.spread = spread(runs);
    }
  }
  // Small GEMMs for the start-up term of the GEMM time model.
  std::vector<double> f, s;
  for (int64_t n : {32, 48, 64, 96, 128, 192, 256}) {
    f.push_back(2.0 * std::pow(double(n), 3));
    s.push_back(gemm_seconds(n, 9));
  }
  p.gemm_overhead_s = fit_overhead(f, s, p.fp32_flops);
  // Bandwidth by working set: half of each core's L2 per thread (copied 16 times per call, so
  // it stays in cache), then sizes for a large shared cache, then 256 MiB (far beyond any
  // cache): the last is the memory bandwidth.
  size_t l2 = l2_bytes_per_core() / 2 * size_t(p.threads);
  p.levels.clear();
  for (size_t total : {l2, size_t(16) << 20, size_t(64) << 20, size_t(256) << 20}) {
    size_t each = total / 2;  // source and destination
    int inner = int(std::clamp(double(size_t(32) << 20) / double(total), 1.0, 16.0));
    double bw = copy_bandwidth(each, inner, 9);
    p.levels.push_back({double(total), bw});
  }
  p.mem_bandwidth = p.levels.back().bandwidth;
}

}  // namespace

FREIGHT_REGISTER_KERNEL(kernels::measure_hardware_peaks, CPU, measure_cpu);

}  // namespace freight::profile

namespace freight {

double host_contention(double seconds) {
  // The same two-thread GEMMs timed by the wall clock and by this thread's CPU clock: the ratio
  // is how much longer work takes than it would on an idle machine (see median_seconds).
  using Clock = std::chrono::steady_clock;
  Tensor a = Tensor::uniform({128, 128}, -1, 1), b = Tensor::uniform({128, 128}, -1, 1);
  Tensor c = Tensor::empty({128, 128});
  auto run = [&] {
    for (int i = 0; i < 4; ++i) kernels::gemm(DeviceType::CPU, a, false, b, false, c, 1.0, 0.0);
  };
  run();
  auto start = Clock::now();
  double cpu0 = profile::thread_cpu_seconds(), wall = 0;
  int n = 0;
  do {
    run();
    ++n;
    wall = std::chrono::duration<double>(Clock::now() - start).count();
  } while (wall < seconds || n < 8);
  double cpu = profile::thread_cpu_seconds() - cpu0;
  return cpu > 0 ? std::max(1.0, wall / cpu) : 1.0;
}

}  // namespace freight
