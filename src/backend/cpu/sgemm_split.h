// Whether a float GEMM is cut between the threads by us rather than by OpenBLAS (blas_cpu.cpp has
// the measurements behind the rule). The plan depends only on the shape and the thread count, so a
// run repeats bit for bit.
#pragma once
#include <algorithm>
#include <cstdint>

namespace freight::cpu {

enum class SgemmSplit {
  None,  // one cblas_sgemm call, threaded by OpenBLAS
  Rows,  // each thread computes a band of rows of C
  Cols,  // each thread computes a band of columns of C
};

struct SgemmPlan {
  SgemmSplit split = SgemmSplit::None;
  int parts = 1;  // threads, each with at least kMinSplitRows rows or columns of C
};

inline constexpr int64_t kMinSplitRows = 128;      // rows or columns of C per thread, at least
inline constexpr int64_t kMinSplitMacs = 1 << 20;  // smaller products stay whole

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
  }
  return p;
}

}  // namespace freight::cpu
