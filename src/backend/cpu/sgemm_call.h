// The CPU backend's single float GEMM call: row-major C = alpha·op(A)·op(B) + beta·C on oneDNN
// or on OpenBLAS, whichever measured faster for the shape (sgemm_onednn.h has the rule and the
// measurements). Both size their team from omp_get_max_threads() and run one thread inside a
// parallel region, so callers cap or split the work the same way for either.
#pragma once
#include <cblas.h>

#include <cstdint>

#include "backend/cpu/sgemm_onednn.h"

namespace freight::cpu {

inline void sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                  int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (use_onednn_sgemm(m, n, k, ta, tb, ldb)) {
    onednn_sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(m),
              int(n), int(k), alpha, a, int(lda), b, int(ldb), beta, c, int(ldc));
}

}  // namespace freight::cpu
