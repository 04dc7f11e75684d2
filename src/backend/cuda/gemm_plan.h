// How a row-major GEMM maps onto cuBLAS's column-major one. Plain C++ (no CUDA types), so the
// mapping is unit-tested on the host (tests/cuda/cuda_host_logic_test.cpp) against a naive
// column-major GEMM with BLAS semantics.
//
// A row-major [r, c] matrix with row length ld is, byte for byte, the column-major [c, r]
// matrix (its transpose) with leading dimension ld. So instead of C = op(A)·op(B) (row-major,
// C [m, n]) cuBLAS computes
//     Cᵀ = op(B)ᵀ · op(A)ᵀ      (column-major [n, m], leading dimension n)
// with B's buffer as its first operand and A's as its second. Seen column-major, B's buffer
// holds Bᵀ when B is not transposed, which is what op(B)ᵀ asks for (no transpose), and holds
// the stored B when it is (transpose); likewise A. Each leading dimension is the operand's row
// length in Freight's layout, i.e. its last dimension.
#pragma once
#include <cstdint>

namespace freight::cuda {

struct GemmPlan {
  bool trans_first = false;   // cuBLAS transa, applied to B's buffer
  bool trans_second = false;  // cuBLAS transb, applied to A's buffer
  int64_t rows = 0;           // cuBLAS m = n (columns of C)
  int64_t cols = 0;           // cuBLAS n = m (rows of C)
  int64_t depth = 0;          // cuBLAS k = k
  int64_t ld_first = 0;       // B's last dimension
  int64_t ld_second = 0;      // A's last dimension
  int64_t ld_out = 0;         // C's last dimension, n
  int64_t stride_first = 0;   // elements between batch matrices of B (0: shared by the batch)
  int64_t stride_second = 0;  // ... of A
  int64_t stride_out = 0;     // ... of C, m·n
  int64_t batch = 1;
};

// a is [m, k] ([k, m] when trans_a), b is [k, n] ([n, k] when trans_b), each optionally with a
// leading batch dimension; c is [m, n] or [batch, m, n]. Shapes are passed as (rank, dims).
inline GemmPlan plan_gemm(int a_rank, const int64_t* a_dims, bool trans_a, int b_rank,
                          const int64_t* b_dims, bool trans_b, int c_rank, const int64_t* c_dims) {
  GemmPlan p;
  int64_t m = c_dims[c_rank - 2], n = c_dims[c_rank - 1];
  int64_t a_rows = a_dims[a_rank - 2], a_cols = a_dims[a_rank - 1];
  int64_t b_cols = b_dims[b_rank - 1];
  p.trans_first = trans_b;
  p.trans_second = trans_a;
  p.rows = n;
  p.cols = m;
  p.depth = trans_a ? a_rows : a_cols;
  p.ld_first = b_cols;
  p.ld_second = a_cols;
  p.ld_out = n;
  p.batch = c_rank == 3 ? c_dims[0] : 1;
  p.stride_first = b_rank == 3 ? b_dims[1] * b_dims[2] : 0;
  p.stride_second = a_rank == 3 ? a_dims[1] * a_dims[2] : 0;
  p.stride_out = m * n;
  return p;
}

}  // namespace freight::cuda
