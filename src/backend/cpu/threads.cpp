// Thread settings and build information of the CPU backend.
#include <cblas.h>
#include <fmt/format.h>
#include <omp.h>
#if defined(__SSE2__)
#include <pmmintrin.h>
#include <xmmintrin.h>
#endif

#include "backend/cpu/conv_cpu.h"
#include "backend/cpu/conv_dnnl.h"
#include "backend/cpu/sgemm_onednn.h"
#include "freight/runtime.h"

namespace freight {

namespace {
// Subnormal floats (below 1.2e-38) take a microcode assist on x86: an operation on one costs
// about a hundred times a normal one. Training makes them: with momentum, the state of a weight
// whose gradient is exactly zero (a ReLU unit that stayed dead, a batch of one) decays by 0.9
// per step and is subnormal after some 800 steps; then the whole optimizer step and the GEMMs
// that read such values crawl (the MLP's step at batch 1 went from 0.5 ms to 3 ms). Like
// oneDNN and most training engines, Freight flushes them to zero on its CPU threads: results
// (flush-to-zero) and inputs (denormals-are-zero). The MXCSR register is per thread, so every
// thread of the OpenMP pool (which OpenBLAS shares) sets it, as does the calling thread.
void flush_subnormals_on_this_thread() {
#if defined(__SSE2__)
  _MM_SET_FLUSH_ZERO_MODE(_MM_FLUSH_ZERO_ON);
  _MM_SET_DENORMALS_ZERO_MODE(_MM_DENORMALS_ZERO_ON);
#endif
}

void flush_subnormals_on_all_threads() {
  flush_subnormals_on_this_thread();
#pragma omp parallel
  flush_subnormals_on_this_thread();
}

// At load time, on the thread that loads the library (the program's main thread).
[[maybe_unused]] const bool g_flushing = (flush_subnormals_on_all_threads(), true);
}  // namespace

void set_num_threads(int n) {
  if (n <= 0) return;
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
  flush_subnormals_on_all_threads();  // a larger pool has new threads
}

int num_threads() {
  return omp_get_max_threads();
}

void on_every_cpu_thread(void (*fn)()) {
#pragma omp parallel
  fn();
}

std::string build_info() {
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  std::string s = fmt::format(
      "OpenBLAS {} (kernels: {}{}), {} threads, g++ {}.{}", openblas_get_config(),
      openblas_get_corename(),
      coretype ? fmt::format(", forced by OPENBLAS_CORETYPE={}", coretype) : std::string(),
      num_threads(), __GNUC__, __GNUC_MINOR__);
  // The instruction-set level of Freight's own CPU kernels (cpu_isa.cpp): records and the peaks
  // cache must tell an avx2 run from an avx512 one.
  s += fmt::format(", CPU kernels {}", cpu_kernel_isa());
  // Which convolution engines Auto picks from (conv_engine_choice.cpp, conv_dnnl.h) and which
  // library runs float GEMMs (sgemm_onednn.h).
  if (!cpu::dnnl_conv_built()) {
    s += ", no oneDNN";
  } else {
    const bool conv = cpu::conv_dnnl_allowed(), gemm = cpu::gemm_dnnl_allowed();
    const std::string uses = conv && gemm ? "convolutions and sgemm where faster"
                             : conv ? "convolutions where faster (sgemm off: FREIGHT_GEMM_DNNL)"
                             : gemm ? "sgemm where faster (convolutions off: FREIGHT_CONV_DNNL)"
                                    : "off (FREIGHT_CONV_DNNL, FREIGHT_GEMM_DNNL)";
    s += fmt::format(", {} {}", cpu::dnnl_conv_version(), uses);
  }
#if FREIGHT_WITH_CUDA
  s += ", CUDA backend built";
#else
  s += ", no CUDA backend";
#endif
  return s;
}

}  // namespace freight
