// oneDNN's sgemm beside OpenBLAS's (internal). Both run row-major float products on the same
// OpenMP threads; which is faster depends on the shape and on the kernels OpenBLAS has, so every
// float GEMM of the CPU backend goes through sgemm() (sgemm_call.h), which asks
// use_onednn_sgemm() below.
//
// Measured on 2 cores of an AVX-512 Xeon (OpenBLAS 0.3.21 SkylakeX kernels, oneDNN 2.6.3), every
// product of the zoo's linear and LSTM layers at batch 1, 64 and 256, forward, input gradient and
// weight gradient, on 1 and 2 threads and as the pieces of sgemm_split.h (bench/gemm_libs.cpp
// prints the table; docs/internals.md, "CPU threads and floating point"):
//   * oneDNN is faster on most: 1.1-1.5x on the middle shapes of mlp, fcn5 and the LSTMs, 1.5-2.5x
//     on the skinny ones (an LSTM's 28-wide input projection and its gradient), 2-3x on a batch of
//     one against a large matrix;
//   * OpenBLAS is faster on products under 2^18 multiply-adds (oneDNN's call costs about 0.2 µs
//     more: a classifier's 10-wide layer) and on weight gradients summed over 2048 rows or more
//     (dW = Aᵀ·B with a deep k: an LSTM's or a language model's over all steps), 0.75-0.95x.
//   * With OpenBLAS's Haswell kernels (an avx2 machine; measured with OPENBLAS_CORETYPE=Haswell
//     ONEDNN_MAX_CPU_ISA=AVX2), oneDNN wins small products by 2-13x too; deep weight gradients
//     still go to OpenBLAS (0.88-0.93x).
// oneDNN's sgemm is deterministic for a given thread count, like OpenBLAS's.
#pragma once
#include <cstdint>
#include <string>

namespace freight::cpu {

// Whether oneDNN's sgemm is expected to beat OpenBLAS's on C[m×n] = op(A)[m×k]·op(B)[k×n]
// (ta, tb: A, B transposed). avx512: OpenBLAS runs its AVX-512 kernels (SkylakeX, Cooperlake,
// SapphireRapids), whose small products cost less than its Haswell kernels' and oneDNN's.
inline bool onednn_sgemm_faster(int64_t m, int64_t n, int64_t k, bool ta, bool tb, bool avx512) {
  if (ta && !tb && k >= 2048) return false;  // a deep weight gradient
  if (avx512 && m * n * k < (int64_t(1) << 18)) return false;
  return true;
}

// Whether this build has oneDNN (CMake found libdnnl-dev 2.x).
bool onednn_sgemm_built();
// Whether GEMMs may run on oneDNN: built, and not turned off by FREIGHT_GEMM_DNNL=0 or
// set_gemm_dnnl_allowed(false).
bool gemm_dnnl_allowed();
void set_gemm_dnnl_allowed(bool allowed);
// Whether a float product of this shape runs on oneDNN: allowed, and onednn_sgemm_faster() with
// the kernels OpenBLAS picked on this machine.
bool use_onednn_sgemm(int64_t m, int64_t n, int64_t k, bool ta, bool tb);

// Row-major C = alpha·op(A)·op(B) + beta·C on oneDNN, on as many OpenMP threads as
// omp_get_max_threads() (one inside a parallel region). Throws freight::Error naming the shape
// when oneDNN refuses it; must not be called when onednn_sgemm_built() is false.
void onednn_sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                  int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

}  // namespace freight::cpu
