// GEMM on the CPU through OpenBLAS (row-major CBLAS) and, for float products of the shapes where it
// measured faster, oneDNN's sgemm (sgemm_call.h, sgemm_onednn.h). Both are OpenMP builds, so their
// threads are the same pool as our kernels'.
//
// Float products of the middle sizes a training step is made of are cut by us, not by OpenBLAS,
// when several threads are available: each thread runs a single-threaded sgemm on its own rows or
// columns of C, or its own stretch of the sum (both libraries' OpenMP builds run one thread when
// called inside a parallel region). The libraries' own threading costs more than it should on
// these shapes, measured on 2 cores with AVX-512 (docs/internals.md, "CPU threads and floating
// point"):
//   * the weight gradient dW = dYᵀ·X, whose depth is the batch (64-256): split the rows of dW.
//     512x784x64 took 0.28 ms on OpenBLAS's two threads and 0.22 ms as two halves of 256 rows;
//     2048x4096x64, 6.6 ms against 5.3 ms.
//   * a batch of at most 128 rows times a wide weight matrix (forward and input gradient):
//     split the columns. 64x512x784: 0.283 → 0.264 ms; 64x9216x128: 1.05 → 1.03 ms.
//   * a batch of 16 to 128 rows through a narrow layer with many inputs (too few columns to
//     cut): split the sum over k, and add the partial products. 64x128x9216 (mnist-cnn) ran no
//     faster on oneDNN's two threads than on one on a Zen 4 EPYC (sgemm_split.h has figures).
// Elsewhere (large or square products, tiny ones) OpenBLAS's threading is as good or better and
// keeps the product (sgemm_split.h has the rule). FREIGHT_GEMM_SPLIT=0 leaves
// every product to OpenBLAS (to measure what the split buys).
//
// Small products, a linear layer at batch 1 say, may be faster on one thread than on the library's
// team, by a margin that depends on the machine: where `freight devices --measure` found one
// (ParallelThresholds::gemm_macs_per_thread), a product gets at most one thread per that many
// multiply-adds (GemmThreadCap, sgemm_call.h, which every float product goes through).
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "backend/cpu/dispatch.h"
#include "backend/cpu/sgemm_call.h"
#include "backend/cpu/sgemm_split.h"
#include "freight/parallel_thresholds.h"
#include "ops/kernels/blas.h"

namespace freight::cpu {
namespace {

bool split_enabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("FREIGHT_GEMM_SPLIT");
    return !(v && std::strcmp(v, "0") == 0);
  }();
  return enabled;
}

// C[m×n] = alpha·op(A)·op(B) + beta·C with the sum over k cut into `parts` stretches: each
// thread's single-threaded sgemm writes its partial product into scratch memory from the caching
// allocator, then the threads add the partials row by row, in thread order, with beta·C. Column
// kk of op(A) starts at a + kk (a + kk·lda when A is transposed), row kk of op(B) at b + kk·ldb
// (b + kk when B is transposed).
void sgemm_depth_split(int parts, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                       const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
                       float* c, int64_t ldc) {
  Tensor partial_buf = Tensor::empty({int64_t(parts) * m * n}, DType::F32, Device::cpu());
  float* const partial = partial_buf.data<float>();
#pragma omp parallel num_threads(parts)
  {
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    // Stretch boundaries on multiples of 16 terms (one AVX-512 vector of A's row).
    const int64_t per = (k + nt * 16 - 1) / (nt * 16) * 16;
    const int64_t begin = std::min(k, t * per), end = std::min(k, begin + per);
    float* const mine = partial + t * m * n;
    if (begin < end)
      sgemm(ta, tb, m, n, end - begin, alpha, ta ? a + begin * lda : a + begin, lda,
            tb ? b + begin : b + begin * ldb, ldb, 0.0f, mine, n);
    else
      std::fill(mine, mine + m * n, 0.0f);
#pragma omp barrier
#pragma omp for schedule(static)
    for (int64_t i = 0; i < m; ++i) {
      float* ci = c + i * ldc;
      for (int64_t j = 0; j < n; ++j) {
        float sum = partial[i * n + j];
        for (int64_t u = 1; u < nt; ++u) sum += partial[u * m * n + i * n + j];
        ci[j] = beta == 0.0f ? sum : sum + beta * ci[j];
      }
    }
  }
}

// C[m×n] = alpha·op(A)·op(B) + beta·C with the rows or columns of C cut into `parts` pieces, one
// single-threaded sgemm per thread (each piece on the library faster for its own shape). Row r of
// op(A) starts at a + r·lda (a + r when A is transposed); column j of op(B) at b + j (b + j·ldb
// when B is transposed).
void sgemm_split(const SgemmPlan& p, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                 const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                 int64_t ldc) {
  if (p.split == SgemmSplit::Depth) {
    sgemm_depth_split(p.parts, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  const int64_t extent = p.split == SgemmSplit::Rows ? m : n;
#pragma omp parallel num_threads(p.parts)
  {
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    // Piece boundaries on multiples of 16 floats (one AVX-512 vector, one cache line).
    const int64_t per = (extent + nt * 16 - 1) / (nt * 16) * 16;
    const int64_t begin = std::min(extent, t * per), end = std::min(extent, begin + per);
    if (begin < end) {
      if (p.split == SgemmSplit::Rows) {
        const float* ar = ta ? a + begin : a + begin * lda;
        sgemm(ta, tb, end - begin, n, k, alpha, ar, lda, b, ldb, beta, c + begin * ldc, ldc);
      } else {
        const float* bc = tb ? b + begin * ldb : b + begin;
        sgemm(ta, tb, m, end - begin, k, alpha, a, lda, bc, ldb, beta, c + begin, ldc);
      }
    }
  }
}

// C[m×n] = alpha·A·Bᵀ + beta·C (A [m×k] at stride lda, B [n×k] at stride ldb) as its transpose
// Cᵀ = B·Aᵀ, an NN product on oneDNN, for the shapes where that is faster
// (transposed_forward_faster, sgemm_onednn.h). Aᵀ and Cᵀ are copies in scratch memory from the
// caching allocator; the threads transpose A by columns, then each multiplies its own band of
// B's rows by Aᵀ (one single-threaded sgemm per thread, as sgemm_split() does: the bands depend
// only on the shape and the thread count, so a run repeats bit for bit), then they write C by
// rows, adding beta·C there (the bias a linear layer put into C).
void sgemm_transposed_forward(int threads, int64_t m, int64_t n, int64_t k, float alpha,
                              const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
                              float* c, int64_t ldc) {
  Tensor at_buf = Tensor::empty({k * m}, DType::F32, Device::cpu());
  Tensor ct_buf = Tensor::empty({n * m}, DType::F32, Device::cpu());
  float* const at = at_buf.data<float>();  // Aᵀ [k×m]
  float* const ct = ct_buf.data<float>();  // Cᵀ [n×m]
  const int parts = int(std::clamp<int64_t>(n / kMinSplitRows, 1, threads));
  constexpr int64_t kBlock = 16;  // a 16x16 tile of floats: 16 cache lines read, 16 written
#pragma omp parallel num_threads(parts)
  {
#pragma omp for schedule(static)
    for (int64_t j0 = 0; j0 < k; j0 += kBlock)
      for (int64_t i0 = 0; i0 < m; i0 += kBlock)
        for (int64_t j = j0; j < std::min(k, j0 + kBlock); ++j)
          for (int64_t i = i0; i < std::min(m, i0 + kBlock); ++i) at[j * m + i] = a[i * lda + j];
    // (the loop's implicit barrier: Aᵀ is whole before any thread reads it)
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t per = (n + nt * 16 - 1) / (nt * 16) * 16;
    const int64_t begin = std::min(n, t * per), end = std::min(n, begin + per);
    if (begin < end)
      onednn_sgemm(false, false, end - begin, m, k, alpha, b + begin * ldb, ldb, at, m, 0.0f,
                   ct + begin * m, m);
#pragma omp barrier
#pragma omp for schedule(static)
    for (int64_t i0 = 0; i0 < m; i0 += kBlock)
      for (int64_t j0 = 0; j0 < n; j0 += kBlock)
        for (int64_t i = i0; i < std::min(m, i0 + kBlock); ++i) {
          float* ci = c + i * ldc;
          for (int64_t j = j0; j < std::min(n, j0 + kBlock); ++j)
            ci[j] = beta == 0.0f ? ct[j * m + i] : ct[j * m + i] + beta * ci[j];
        }
  }
}

void gemm_cpu(const Tensor& a, bool ta, const Tensor& b, bool tb, Tensor& c, double alpha,
              double beta) {
  bool batched = c.dim() == 3;
  int64_t batch = batched ? c.size(0) : 1;
  int64_t m = c.size(-2), n = c.size(-1);
  int64_t k = ta ? a.size(-2) : a.size(-1);
  int64_t lda = a.size(-1), ldb = b.size(-1), ldc = n;
  int64_t sa = batched ? a.size(1) * a.size(2) : 0, sb = batched ? b.size(1) * b.size(2) : 0;
  auto opa = ta ? CblasTrans : CblasNoTrans, opb = tb ? CblasTrans : CblasNoTrans;
  const GemmThreadCap cap(m, n, k);  // before the split, which counts the threads left
  dispatch_floating(c.dtype(), "gemm", [&](auto tag) {
    using T = decltype(tag);
    const T* pa = static_cast<const T*>(a.data_ptr());
    const T* pb = static_cast<const T*>(b.data_ptr());
    T* pc = static_cast<T*>(c.data_ptr());
    for (int64_t i = 0; i < batch; ++i) {
      if (k == 0) {  // BLAS may skip scaling C when k = 0; do it explicitly
        for (int64_t j = 0; j < m * n; ++j)
          pc[i * m * n + j] = beta == 0 ? T(0) : T(beta) * pc[i * m * n + j];
        continue;
      }
      if constexpr (std::is_same_v<T, float>) {
        if (use_transposed_forward(m, n, k, ta, tb)) {
          sgemm_transposed_forward(omp_in_parallel() ? 1 : omp_get_max_threads(), m, n, k,
                                   float(alpha), pa + i * sa, lda, pb + i * sb, ldb, float(beta),
                                   pc + i * m * n, ldc);
          continue;
        }
        const SgemmPlan plan =
            split_enabled()
                ? plan_sgemm(m, n, k, ta, tb, omp_in_parallel() ? 1 : omp_get_max_threads())
                : SgemmPlan{};
        if (plan.split != SgemmSplit::None && plan.parts > 1)
          sgemm_split(plan, ta, tb, m, n, k, float(alpha), pa + i * sa, lda, pb + i * sb, ldb,
                      float(beta), pc + i * m * n, ldc);
        else
          sgemm(ta, tb, m, n, k, float(alpha), pa + i * sa, lda, pb + i * sb, ldb, float(beta),
                pc + i * m * n, ldc);
      } else {
        cblas_dgemm(CblasRowMajor, opa, opb, m, n, k, alpha, pa + i * sa, lda, pb + i * sb, ldb,
                    beta, pc + i * m * n, ldc);
      }
    }
  });
}

}  // namespace

FREIGHT_REGISTER_KERNEL(kernels::gemm, CPU, gemm_cpu);

}  // namespace freight::cpu
