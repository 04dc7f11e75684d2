// oneDNN's sgemm for the CPU backend's float products (sgemm_onednn.h).
#include "backend/cpu/sgemm_onednn.h"

#if FREIGHT_HAVE_DNNL
#include <dnnl.h>
#endif

#include <cblas.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#include <fmt/format.h>

#include "freight/error.h"

namespace freight::cpu {
namespace {

// FREIGHT_GEMM_DNNL=0 (or "off", "false") keeps every GEMM on OpenBLAS from the start.
bool allowed_at_start() {
  const char* v = std::getenv("FREIGHT_GEMM_DNNL");
  return !(v && (std::strcmp(v, "0") == 0 || std::strcmp(v, "off") == 0 ||
                 std::strcmp(v, "false") == 0));
}
std::atomic<bool> g_allowed{allowed_at_start()};

}  // namespace

GemmKernels gemm_kernels() {
  static const GemmKernels kernels = [] {
    GemmKernels g;
    const std::string core = openblas_get_corename();
    g.openblas_avx512 = core == "SkylakeX" || core == "Cooperlake" || core == "SapphireRapids";
#if FREIGHT_HAVE_DNNL
    // oneDNN's ISA levels are bit sets: each AVX-512 level contains avx512_core's bits.
    const unsigned isa = unsigned(dnnl_get_effective_cpu_isa());
    g.onednn_avx512 =
        (isa & unsigned(dnnl_cpu_isa_avx512_core)) == unsigned(dnnl_cpu_isa_avx512_core);
#endif
    return g;
  }();
  return kernels;
}

bool gemm_dnnl_allowed() {
  return onednn_sgemm_built() && g_allowed.load(std::memory_order_relaxed);
}
void set_gemm_dnnl_allowed(bool allowed) {
  g_allowed = allowed;
}
bool use_onednn_sgemm(int64_t m, int64_t n, int64_t k, bool ta, bool tb, int64_t ldb, int threads) {
  return gemm_dnnl_allowed() && onednn_sgemm_faster(m, n, k, ta, tb, ldb, gemm_kernels(), threads);
}

bool use_transposed_forward(int64_t m, int64_t n, int64_t k, bool ta, bool tb) {
  return gemm_dnnl_allowed() && transposed_forward_faster(m, n, k, ta, tb, gemm_kernels());
}

#if FREIGHT_HAVE_DNNL
bool onednn_sgemm_built() {
  return true;
}

void onednn_sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                  int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  // oneDNN's C API is row-major, like Freight's tensors.
  const dnnl_status_t s =
      dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  FREIGHT_CHECK(s == dnnl_success,
                fmt::format("oneDNN sgemm refused C[{}x{}] = op(A)·op(B) with k = {} (A{}, B{}, "
                            "lda {}, ldb {}, ldc {}): status {}; FREIGHT_GEMM_DNNL=0 keeps GEMMs "
                            "on OpenBLAS",
                            m, n, k, ta ? " transposed" : "", tb ? " transposed" : "", lda, ldb,
                            ldc, int(s)));
}
#else
bool onednn_sgemm_built() {
  return false;
}

void onednn_sgemm(bool, bool, int64_t m, int64_t n, int64_t k, float, const float*, int64_t,
                  const float*, int64_t, float, float*, int64_t) {
  throw Error(
      fmt::format("oneDNN sgemm asked for C[{}x{}] (k = {}) in a build without oneDNN", m, n, k));
}
#endif

}  // namespace freight::cpu
