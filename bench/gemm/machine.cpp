#include "machine.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace gemm_lab {

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string read_line(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  std::getline(f, s);
  return s;
}

// "48K" / "2048K" / "480M" (sysfs) to bytes.
int64_t parse_size(const std::string& s) {
  if (s.empty()) return 0;
  int64_t v = std::atoll(s.c_str());
  switch (s.back()) {
    case 'K':
      return v << 10;
    case 'M':
      return v << 20;
    case 'G':
      return v << 30;
  }
  return v;
}

std::string human(int64_t bytes) {
  char buf[32];
  if (bytes >= (int64_t(1) << 20) && bytes % (int64_t(1) << 20) == 0)
    std::snprintf(buf, sizeof buf, "%lld MiB", (long long)(bytes >> 20));
  else
    std::snprintf(buf, sizeof buf, "%lld KiB", (long long)(bytes >> 10));
  return buf;
}

// Processors named in a sysfs cpu list such as "0-1" or "0,2,4-7".
int count_cpu_list(const std::string& list) {
  int count = 0;
  std::stringstream ss(list);
  std::string part;
  while (std::getline(ss, part, ',')) {
    int lo = 0, hi = 0;
    if (std::sscanf(part.c_str(), "%d-%d", &lo, &hi) == 2)
      count += hi - lo + 1;
    else if (!part.empty())
      ++count;
  }
  return std::max(count, 1);
}

#if defined(__x86_64__)
// The clock: 16 dependent register-register additions per iteration, each waiting for the
// previous one's result; an integer addition takes exactly one cycle on every x86 core of the
// last 25 years. (Not `add $1, reg`: recent Intel cores fold additions of small constants in the
// renamer, and such a chain runs several times faster than the clock.) The loop counter is a
// separate chain that runs alongside, so one iteration takes 16 cycles.
double measure_ghz_once(int64_t iters) {
  uint64_t x = 0, one = 1;
  const double t0 = now_s();
  for (int64_t i = 0; i < iters; ++i)
    asm volatile(
        "add %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\t"
        "add %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\t"
        "add %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\t"
        "add %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\t"
        : "+r"(x)
        : "r"(one));
  return 16.0 * double(iters) / (now_s() - t0) * 1e-9;
}

// Vector FMA throughput: 16 independent accumulators (an FMA has a latency of about 4 cycles,
// so with 2 units at least 8 must be in flight), 16 FMAs per iteration. Inputs are zeros: no
// denormals, no exceptions. Returns FMA instructions per second.
__attribute__((target("avx512f"))) double fma_rate_avx512(int64_t iters) {
  const double t0 = now_s();
  int64_t n = iters;
  asm volatile(
      "vpxord %%zmm16, %%zmm16, %%zmm16\n\tvpxord %%zmm17, %%zmm17, %%zmm17\n\t"
      "vpxord %%zmm0, %%zmm0, %%zmm0\n\tvpxord %%zmm1, %%zmm1, %%zmm1\n\t"
      "vpxord %%zmm2, %%zmm2, %%zmm2\n\tvpxord %%zmm3, %%zmm3, %%zmm3\n\t"
      "vpxord %%zmm4, %%zmm4, %%zmm4\n\tvpxord %%zmm5, %%zmm5, %%zmm5\n\t"
      "vpxord %%zmm6, %%zmm6, %%zmm6\n\tvpxord %%zmm7, %%zmm7, %%zmm7\n\t"
      "vpxord %%zmm8, %%zmm8, %%zmm8\n\tvpxord %%zmm9, %%zmm9, %%zmm9\n\t"
      "vpxord %%zmm10, %%zmm10, %%zmm10\n\tvpxord %%zmm11, %%zmm11, %%zmm11\n\t"
      "vpxord %%zmm12, %%zmm12, %%zmm12\n\tvpxord %%zmm13, %%zmm13, %%zmm13\n\t"
      "vpxord %%zmm14, %%zmm14, %%zmm14\n\tvpxord %%zmm15, %%zmm15, %%zmm15\n\t"
      "1:\n\t"
      "vfmadd231ps %%zmm16, %%zmm17, %%zmm0\n\tvfmadd231ps %%zmm16, %%zmm17, %%zmm1\n\t"
      "vfmadd231ps %%zmm16, %%zmm17, %%zmm2\n\tvfmadd231ps %%zmm16, %%zmm17, %%zmm3\n\t"
      "vfmadd231ps %%zmm16, %%zmm17, %%zmm4\n\tvfmadd231ps %%zmm16, %%zmm17, %%zmm5\n\t"
      "vfmadd231ps %%zmm16, %%zmm17, %%zmm6\n\tvfmadd231ps %%zmm16, %%zmm17, %%zmm7\n\t"
      "vfmadd231ps %%zmm16, %%zmm17, %%zmm8\n\tvfmadd231ps %%zmm16, %%zmm17, %%zmm9\n\t"
      "vfmadd231ps %%zmm16, %%zmm17, %%zmm10\n\tvfmadd231ps %%zmm16, %%zmm17, %%zmm11\n\t"
      "vfmadd231ps %%zmm16, %%zmm17, %%zmm12\n\tvfmadd231ps %%zmm16, %%zmm17, %%zmm13\n\t"
      "vfmadd231ps %%zmm16, %%zmm17, %%zmm14\n\tvfmadd231ps %%zmm16, %%zmm17, %%zmm15\n\t"
      "dec %0\n\tjnz 1b\n\t"
      "vzeroupper\n\t"
      : "+r"(n)
      :
      : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",
        "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "xmm16", "xmm17", "cc");
  return 16.0 * double(iters) / (now_s() - t0);
}

// The same with 256-bit AVX2 registers (12 accumulators: AVX2 has 16 vector registers).
__attribute__((target("avx2,fma"))) double fma_rate_avx2(int64_t iters) {
  const double t0 = now_s();
  int64_t n = iters;
  asm volatile(
      "vxorps %%ymm12, %%ymm12, %%ymm12\n\tvxorps %%ymm13, %%ymm13, %%ymm13\n\t"
      "vxorps %%ymm0, %%ymm0, %%ymm0\n\tvxorps %%ymm1, %%ymm1, %%ymm1\n\t"
      "vxorps %%ymm2, %%ymm2, %%ymm2\n\tvxorps %%ymm3, %%ymm3, %%ymm3\n\t"
      "vxorps %%ymm4, %%ymm4, %%ymm4\n\tvxorps %%ymm5, %%ymm5, %%ymm5\n\t"
      "vxorps %%ymm6, %%ymm6, %%ymm6\n\tvxorps %%ymm7, %%ymm7, %%ymm7\n\t"
      "vxorps %%ymm8, %%ymm8, %%ymm8\n\tvxorps %%ymm9, %%ymm9, %%ymm9\n\t"
      "vxorps %%ymm10, %%ymm10, %%ymm10\n\tvxorps %%ymm11, %%ymm11, %%ymm11\n\t"
      "1:\n\t"
      "vfmadd231ps %%ymm12, %%ymm13, %%ymm0\n\tvfmadd231ps %%ymm12, %%ymm13, %%ymm1\n\t"
      "vfmadd231ps %%ymm12, %%ymm13, %%ymm2\n\tvfmadd231ps %%ymm12, %%ymm13, %%ymm3\n\t"
      "vfmadd231ps %%ymm12, %%ymm13, %%ymm4\n\tvfmadd231ps %%ymm12, %%ymm13, %%ymm5\n\t"
      "vfmadd231ps %%ymm12, %%ymm13, %%ymm6\n\tvfmadd231ps %%ymm12, %%ymm13, %%ymm7\n\t"
      "vfmadd231ps %%ymm12, %%ymm13, %%ymm8\n\tvfmadd231ps %%ymm12, %%ymm13, %%ymm9\n\t"
      "vfmadd231ps %%ymm12, %%ymm13, %%ymm10\n\tvfmadd231ps %%ymm12, %%ymm13, %%ymm11\n\t"
      "dec %0\n\tjnz 1b\n\t"
      "vzeroupper\n\t"
      : "+r"(n)
      :
      : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",
        "xmm11", "xmm12", "xmm13", "cc");
  return 12.0 * double(iters) / (now_s() - t0);
}
#endif

}  // namespace

Caches read_caches(std::string* text) {
  Caches c;
  int l3_sharing = 1;
  bool found = false;
  for (int index = 0; index < 8; ++index) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index);
    const std::string level = read_line(dir + "/level"), type = read_line(dir + "/type");
    const int64_t size = parse_size(read_line(dir + "/size"));
    if (level.empty() || size == 0) continue;
    found = true;
    if (level == "1" && type == "Data") c.l1d = size;
    if (level == "2") c.l2 = size;
    if (level == "3") {
      c.l3 = size;
      l3_sharing = count_cpu_list(read_line(dir + "/shared_cpu_list"));
    }
  }
  if (!found) {  // no sysfs (a container may hide it): glibc's view of CPUID
    if (long v = sysconf(_SC_LEVEL1_DCACHE_SIZE); v > 0) c.l1d = v;
    if (long v = sysconf(_SC_LEVEL2_CACHE_SIZE); v > 0) c.l2 = v;
    if (long v = sysconf(_SC_LEVEL3_CACHE_SIZE); v > 0) c.l3 = v;
  }
  if (text)
    *text = "L1d " + human(c.l1d) + " and L2 " + human(c.l2) + " per core, L3 " + human(c.l3) +
            " shared by " + std::to_string(l3_sharing) + " processor" +
            (l3_sharing > 1 ? "s" : "") + (found ? "" : " (from sysconf)");
  return c;
}

Machine probe_machine(bool measure) {
  Machine m;
  std::ifstream info("/proc/cpuinfo");
  std::string line, family, model, stepping;
  auto value = [](const std::string& l) {
    size_t colon = l.find(':');
    return colon == std::string::npos ? std::string() : l.substr(colon + 2);
  };
  while (std::getline(info, line)) {
    if (m.cpu_model.empty() && line.rfind("model name", 0) == 0) m.cpu_model = value(line);
    if (family.empty() && line.rfind("cpu family", 0) == 0) family = value(line);
    if (model.empty() && line.rfind("model\t", 0) == 0) model = value(line);
    if (stepping.empty() && line.rfind("stepping", 0) == 0) stepping = value(line);
    if (m.cpuinfo_ghz == 0 && line.rfind("cpu MHz", 0) == 0)
      m.cpuinfo_ghz = std::atof(value(line).c_str()) / 1000.0;
  }
  if (m.cpu_model.empty()) m.cpu_model = "unknown CPU";
  if (!family.empty())
    m.cpu_signature = "family " + family + " model " + model + " stepping " + stepping;
  m.cores = omp_get_num_procs();
  m.caches = read_caches(&m.cache_text);

#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) {
    m.isa = "AVX-512", m.vector_floats = 16;
  } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    m.isa = "AVX2+FMA", m.vector_floats = 8;
  } else {
    m.isa = "SSE (no FMA)", m.vector_floats = 4;
  }
  if (measure) {
    // Best of many short runs (about a millisecond each): on a busy machine a run that was
    // preempted is only slower, and a short run is likely to find the core to itself.
    for (int r = 0; r < 50; ++r) m.measured_ghz = std::max(m.measured_ghz, measure_ghz_once(2e5));
    auto rate = [&](int64_t iters) {
      return m.vector_floats == 16  ? fma_rate_avx512(iters)
             : m.vector_floats == 8 ? fma_rate_avx2(iters)
                                    : 0.0;
    };
    double best1 = 0;
    for (int r = 0; r < 50; ++r) best1 = std::max(best1, rate(1e5));
    double best_all = 0;
    for (int r = 0; r < 20; ++r) {  // all cores at once: total FMAs over the region's wall time
      const double t0 = now_s();
#pragma omp parallel num_threads(m.cores)
      rate(1e6);
      best_all =
          std::max(best_all, m.cores * 1e6 * (m.vector_floats == 16 ? 16 : 12) / (now_s() - t0));
    }
    const double flops_per_fma = 2.0 * m.vector_floats;
    m.fma_loop_gflops_1 = best1 * flops_per_fma * 1e-9;
    m.fma_loop_gflops_all = best_all * flops_per_fma * 1e-9;
    m.fma_per_cycle = best1 / (m.measured_ghz * 1e9);
    m.fma_units = std::max(1, int(std::lround(m.fma_per_cycle)));
  }
#else
  m.isa = "unknown (not x86-64)";
  m.vector_floats = 4;
#endif
  if (m.measured_ghz == 0) m.measured_ghz = m.cpuinfo_ghz > 0 ? m.cpuinfo_ghz : 1.0;
  return m;
}

std::vector<std::string> Machine::explain_peak() const {
  char buf[4][400];
  std::snprintf(buf[0], sizeof buf[0],
                "clock: %.2f GHz measured with a chain of dependent integer additions (one per "
                "cycle); /proc/cpuinfo says %.2f GHz",
                measured_ghz, cpuinfo_ghz);
  std::snprintf(buf[1], sizeof buf[1],
                "vector width: %s, %d floats per register; FMA units: %d per core (a loop of "
                "independent %d-float FMAs retires %.2f per cycle)",
                isa.c_str(), vector_floats, fma_units, vector_floats, fma_per_cycle);
  std::snprintf(buf[2], sizeof buf[2],
                "theoretical peak: %d core(s) x %.2f GHz x %d FMA units x %d floats x 2 flops = "
                "%.1f GFLOP/s (%.1f GFLOP/s per core)",
                cores, measured_ghz, fma_units, vector_floats, peak_gflops(cores), peak_gflops(1));
  std::snprintf(buf[3], sizeof buf[3],
                "the FMA loop itself reaches %.1f GFLOP/s on one core and %.1f GFLOP/s on %d "
                "(the clock may drop when every core runs wide vectors)",
                fma_loop_gflops_1, fma_loop_gflops_all, cores);
  return {buf[0], buf[1], buf[2], buf[3]};
}

}  // namespace gemm_lab
