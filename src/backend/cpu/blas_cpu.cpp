// GEMM on the CPU through OpenBLAS (row-major CBLAS). The library is the OpenMP build, so its
// threads are the same pool as our kernels'.
#include <cblas.h>

#include "backend/cpu/dispatch.h"
#include "ops/kernels/blas.h"

namespace freight::cpu {
namespace {

void gemm_cpu(const Tensor& a, bool ta, const Tensor& b, bool tb, Tensor& c, double alpha,
              double beta) {
  bool batched = c.dim() == 3;
  int64_t batch = batched ? c.size(0) : 1;
  int64_t m = c.size(-2), n = c.size(-1);
  int64_t k = ta ? a.size(-2) : a.size(-1);
  int64_t lda = a.size(-1), ldb = b.size(-1), ldc = n;
  int64_t sa = batched ? a.size(1) * a.size(2) : 0, sb = batched ? b.size(1) * b.size(2) : 0;
  auto opa = ta ? CblasTrans : CblasNoTrans, opb = tb ? CblasTrans : CblasNoTrans;
  dispatch_floating(c.dtype(), "gemm", [&](auto tag) {
    using T = decltype(tag);
    const T* pa = static_cast<const T*>(a.data_ptr());
    const T* pb = static_cast<const T*>(b.data_ptr());
    T* pc = static_cast<T*>(c.data_ptr());
    for (int64_t i = 0; i < batch; ++i) {
      if (k == 0) {  // BLAS may skip scaling C when k = 0; do it explicitly
        for (int64_t j = 0; j < m * n; ++j) pc[i * m * n + j] = beta == 0 ? T(0) : T(beta) * pc[i * m * n + j];
        continue;
      }
      if constexpr (std::is_same_v<T, float>)
        cblas_sgemm(CblasRowMajor, opa, opb, m, n, k, float(alpha), pa + i * sa, lda, pb + i * sb,
                    ldb, float(beta), pc + i * m * n, ldc);
      else
        cblas_dgemm(CblasRowMajor, opa, opb, m, n, k, alpha, pa + i * sa, lda, pb + i * sb, ldb,
                    beta, pc + i * m * n, ldc);
    }
  });
}

}  // namespace

FREIGHT_REGISTER_KERNEL(kernels::gemm, CPU, gemm_cpu);

}  // namespace freight::cpu
