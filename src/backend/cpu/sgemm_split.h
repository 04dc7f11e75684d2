// Whether a float GEMM is cut between the threads by us rather than by OpenBLAS (blas_cpu.cpp has
// the measurements behind the rule). The plan depends only on the shape and the thread count, so a
// run repeats bit for bit.
#pragma once
#include <algorithm>
#include <cstdint>

namespace freight::cpu {

enum class SgemmSplit {
  None,   // one cblas_sgemm call, threaded by OpenBLAS
  Rows,   // each thread computes a band of rows of C
  Cols,   // each thread computes a band of columns of C
  Depth,  // each thread sums its own stretch of k into a partial C; the partials are added in
          // thread order (so a run repeats bit for bit, though 1 and 2 threads differ in the
          // last bits)
};

struct SgemmPlan {
  SgemmSplit split = SgemmSplit::None;
  int parts = 1;  // threads, each with at least kMinSplitRows rows or columns of C
};

inline constexpr int64_t kMinSplitRows = 128;      // rows or columns of C per thread, at least
inline constexpr int64_t kMinSplitMacs = 1 << 20;  // smaller products stay whole
inline constexpr int64_t kMinSplitDepth = 1024;    // terms of the sum per thread, at least

// C[m×n] = op(A)[m×k]·op(B)[k×n] on `threads` threads; ta, tb: A, B transposed.
inline SgemmPlan plan_sgemm(int64_t m, int64_t n, int64_t k, bool ta, bool tb, int threads) {
  SgemmPlan p;
  if (threads < 2 || m * n * k < kMinSplitMacs) return p;
  if (ta && !tb && k <= 256 && m >= 2 * kMinSplitRows) {
    // A weight gradient dW = dYᵀ·X, whose depth is the batch: bands of rows of dW.
    p.split = SgemmSplit::Rows;
    p.parts = int(std::min<int64_t>(threads, m / kMinSplitRows));
  } else if (m <= 128 && n >= 2 * kMinSplitRows) {
    // A batch of at most 128 rows against a wide matrix: bands of columns.
    p.split = SgemmSplit::Cols;
    p.parts = int(std::min<int64_t>(threads, n / kMinSplitRows));
  } else if (m >= 16 && m <= 128 && n < 2 * kMinSplitRows && k >= 2 * kMinSplitDepth) {
    // A batch of at most 128 rows through a narrow layer of many inputs (mnist-cnn's 9216 to
    // 128): too few columns and rows to cut, so the sum is cut. 64x128x9216 NT ran at the same
    // 70 GFLOP/s on oneDNN's two threads as on one on a Zen 4 EPYC, and at 120-145 as two
    // halves of k. Not measured on the Xeon and the Zen 3; their one-thread rates in
    // bench/results (134 and 72 GFLOP/s) against their two-thread ones (185 and 118) leave
    // room for the halves there too, if the halves scale as they do here.
    p.split = SgemmSplit::Depth;
    p.parts = int(std::min<int64_t>(threads, k / kMinSplitDepth));
  }
  return p;
}

}  // namespace freight::cpu
