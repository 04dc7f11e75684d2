// The CPU backend's single float GEMM call: row-major C = alpha·op(A)·op(B) + beta·C on oneDNN
// or on OpenBLAS, whichever measured faster for the shape (sgemm_onednn.h has the rule and the
// measurements), on as many threads as its work pays for. Both libraries size their team from
// omp_get_max_threads() and run one thread inside a parallel region, so callers cap or split the
// work the same way for either.
#pragma once
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "backend/cpu/sgemm_onednn.h"
#include "freight/parallel_thresholds.h"

namespace freight::cpu {

// At most one thread per ParallelThresholds::gemm_macs_per_thread multiply-adds of the product
// (measured per machine by `freight devices --measure`) for the libraries' calls in its scope:
// the calling thread's OpenMP count is lowered, and restored on scope exit. Without it oneDNN's
// sgemm woke the whole team for an LSTM step's 1x512x128 product (2 threads, 55 parallel regions
// per lstm-rows step at batch 1, which ran 1.6 times slower than on one thread on a 2-vCPU EPYC).
class GemmThreadCap {
 public:
  GemmThreadCap(int64_t m, int64_t n, int64_t k) {
    const double per_thread = parallel_thresholds().gemm_macs_per_thread;
    if (per_thread <= 0 || omp_in_parallel()) return;
    saved_ = omp_get_max_threads();
    const double worth = std::floor(double(m) * double(n) * double(k) / per_thread);
    const int cap = int(std::clamp(worth, 1.0, double(saved_)));
    if (cap < saved_)
      omp_set_num_threads(cap);
    else
      saved_ = 0;
  }
  ~GemmThreadCap() {
    if (saved_ > 0) omp_set_num_threads(saved_);
  }
  GemmThreadCap(const GemmThreadCap&) = delete;
  GemmThreadCap& operator=(const GemmThreadCap&) = delete;

 private:
  int saved_ = 0;  // the count to restore; 0 when not capped
};

inline void sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                  int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  const GemmThreadCap cap(m, n, k);
  const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();  // as the libraries see it
  if (use_onednn_sgemm(m, n, k, ta, tb, ldb, threads)) {
    onednn_sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(m),
              int(n), int(k), alpha, a, int(lda), b, int(ldb), beta, c, int(ldc));
}

}  // namespace freight::cpu
