// Matrix products. Operands contiguous, row-major; 2-D ([m,k]) or batched 3-D ([b,m,k]).
#pragma once
#include "core/kernel.h"
#include "freight/tensor.h"

namespace freight::kernels {
// c = alpha · op(a) · op(b) + beta · c, op(x) = xᵀ when the flag is set. With beta = 0, c's
// previous contents are ignored (NaN included).
FREIGHT_KERNEL(gemm, void(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c,
                          double alpha, double beta));
}  // namespace freight::kernels
