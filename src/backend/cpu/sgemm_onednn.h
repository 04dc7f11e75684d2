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
//     (dW = Aᵀ·B with a deep k: an LSTM's or a language model's over all steps), 0.75-0.95x,
//     unless the gradient is narrow: one with fewer than 256 columns (lstm-rows' 512x156 over
//     its 28 steps at batch 256, k = 7168) ran 1.47x faster on oneDNN's AVX-512 sgemm on 2
//     threads of the Xeon (1.02x on one), 1.23x on a Zen 4 EPYC (1.06x on one); at 256 columns
//     the machines part (lstm-ptb's 10000x256: the Xeon 0.83x, the Zen 4 1.06-1.18x), and
//     oneDNN's AVX2 sgemm loses them all (the Zen 3 EPYC: 0.74x on the narrow one).
//   * With OpenBLAS's Haswell kernels (an avx2 machine; measured with OPENBLAS_CORETYPE=Haswell
//     ONEDNN_MAX_CPU_ISA=AVX2), oneDNN wins small products by 2-13x too; deep weight gradients
//     still go to OpenBLAS (0.88-0.93x).
//   * On a CPU without AVX-512 (measured on 2 cores of a Zen 3 EPYC, OpenBLAS Zen kernels),
//     oneDNN's AVX2 sgemm reads an untransposed B in place, row after row at stride ldb: with ldb
//     a multiple of 512 floats (2 KiB) those rows map onto the same L1 sets and evict each other,
//     and the product runs at half speed (64x4096x1024 NN, one thread: 40 GF/s at ldb 4096, 92
//     at ldb 4104; NN and TN alike, any lda; NT and TT unaffected). A weight whose input width is
//     such a multiple (fcn5's 2048 and 4096, mlp's 512, mnist-cnn's 9216) meets it in every dX =
//     dY·W, and a weight gradient in its dW = dYᵀ·X; OpenBLAS, which packs B first, runs them at
//     full speed. Where oneDNN reads few rows of B per row of C it stays ahead all the same, so
//     the rule takes what a grid of shapes on one and two threads showed (n 512-9216, k and m
//     1-4096): an NN product of at least 32 rows (OpenBLAS 1.1-2x; with fewer, a batch of one's
//     dX, oneDNN's GEMV-like path is 1.05-4x faster), and a TN product of at most 128 rows summed
//     over at least 64 (a narrow layer's weight gradient: OpenBLAS 1.2-2x; over fewer rows, or
//     for wider layers, whose products the split cuts into row bands, oneDNN 1.1-2x).
//   * A forward (NT) of more than 128 rows (so not cut into column bands) through a layer of
//     at least 2048 inputs and 1024 outputs, on more than one thread: OpenBLAS on all three
//     machines (fcn5's two wide layers at batch 256 on 2 threads: 1.04-1.10x on the Xeon,
//     1.21-1.24x on the Zen 3 EPYC, 1.29-1.31x on a Zen 4 EPYC with AVX-512, whose oneDNN ran
//     them little faster than on one thread). On one thread the machines differ (OpenBLAS
//     0.93-0.95x on the AVX-512 ones, 1.2x on the Zen 3) and oneDNN keeps them; so does a
//     narrower layer (mnist-cnn's 9216 to 128), on which they differ too (the Xeon 0.80x).
// oneDNN's sgemm is deterministic for a given thread count, like OpenBLAS's.
#pragma once
#include <cstdint>
#include <string>

namespace freight::cpu {

// The kernels each library runs on this machine.
struct GemmKernels {
  bool openblas_avx512 = false;  // OpenBLAS's AVX-512 kernels (SkylakeX, Cooperlake,
                                 // SapphireRapids), whose small products cost less than its
                                 // Haswell kernels' and oneDNN's
  bool onednn_avx512 = false;    // oneDNN's AVX-512 sgemm (else its AVX2 one)
};

// Whether oneDNN's sgemm is expected to beat OpenBLAS's on C[m×n] = op(A)[m×k]·op(B)[k×n]
// (ta, tb: A, B transposed; ldb: B's row stride) on `threads` threads.
inline bool onednn_sgemm_faster(int64_t m, int64_t n, int64_t k, bool ta, bool tb, int64_t ldb,
                                GemmKernels kernels, int threads = 1) {
  if (ta && !tb && k >= 2048 && !(kernels.onednn_avx512 && n < 256))
    return false;  // a deep weight gradient, unless narrow on AVX-512
  if (threads > 1 && !ta && tb && m > 128 && n >= 1024 && k >= 2048) return false;  // wide NT
  if (kernels.openblas_avx512 && m * n * k < (int64_t(1) << 18)) return false;
  if (!kernels.onednn_avx512 && !tb && ldb % 512 == 0) {  // B's rows alias in L1
    if (!ta && m >= 32) return false;
    if (ta && m <= 128 && k >= 64) return false;
  }
  return true;
}

// Whether a forward product C[m×n] = A·Bᵀ (A untransposed, B transposed: a batch of m rows through
// a layer whose weight B is [n×k]) is faster on oneDNN as its transpose Cᵀ = B·Aᵀ, an NN product
// on a copy Aᵀ, with C written back from Cᵀ (blas_cpu.cpp). oneDNN's AVX-512 sgemm runs the NT
// product of a small batch through a layer of many inputs at 60-65% of the GEMM peak, where the
// same multiply-adds as an NN product, weight first, run at 75-85% (bench/gemm_libs.cpp; measured
// on a 2-core Zen 4 EPYC, oneDNN 2.6.3; both copies included, 1 and 2 threads alike):
//   64x4096x2048 (fcn5's middle layer at batch 64) 1.25x, 64x1024x4096 1.28x, 32x4096x2048 1.65x,
//   16x4096x2048 1.75x, 128x4096x2048 1.10x, 64x1000x1024 1.34x;
// and it loses where the batch is under 16 rows (8x4096x2048: 0.6x, oneDNN's GEMV-like path),
// where the layer has few inputs (64x8192x512, 64x10000x256: 0.85-1.0x) or few outputs
// (64x256x4096, 128x512x1024: 0.85-1.0x). oneDNN's AVX2 sgemm runs the NT product at full speed
// (164 GFLOP/s at 64x4096x2048 on the same Zen 4 with DNNL_MAX_CPU_ISA=AVX2, 158 transposed), so
// it keeps the NT call. Only an AVX-512 Zen 4 was measured; an AVX-512 Xeon is assumed alike.
inline bool transposed_forward_faster(int64_t m, int64_t n, int64_t k, bool ta, bool tb,
                                      GemmKernels kernels) {
  return kernels.onednn_avx512 && !ta && tb && m >= 16 && m <= 128 && n >= 1000 && k >= 1024;
}

// Whether this build has oneDNN (CMake found libdnnl-dev 2.x).
bool onednn_sgemm_built();
// Whether GEMMs may run on oneDNN: built, and not turned off by FREIGHT_GEMM_DNNL=0 or
// set_gemm_dnnl_allowed(false).
bool gemm_dnnl_allowed();
void set_gemm_dnnl_allowed(bool allowed);
// The kernels OpenBLAS and oneDNN picked on this machine.
GemmKernels gemm_kernels();
// Whether a float product of this shape runs on oneDNN on `threads` threads: allowed, and
// onednn_sgemm_faster() with this machine's gemm_kernels().
bool use_onednn_sgemm(int64_t m, int64_t n, int64_t k, bool ta, bool tb, int64_t ldb,
                      int threads = 1);

// transposed_forward_faster() with this machine's kernels, oneDNN allowed.
bool use_transposed_forward(int64_t m, int64_t n, int64_t k, bool ta, bool tb);

// Row-major C = alpha·op(A)·op(B) + beta·C on oneDNN, on as many OpenMP threads as
// omp_get_max_threads() (one inside a parallel region). Throws freight::Error naming the shape
// when oneDNN refuses it; must not be called when onednn_sgemm_built() is false.
void onednn_sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                  int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

}  // namespace freight::cpu
