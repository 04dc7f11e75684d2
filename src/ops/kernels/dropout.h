// Kernel slots of dropout. Operands are contiguous. The mask is a pure function of
// (seed, offset, element index), so every backend draws the same one:
//   u_i = philox::to_unit_float(philox::element(seed, offset, i)),  kept when u_i >= p.
#pragma once
#include "core/kernel.h"
#include "freight/tensor.h"

namespace freight::kernels {
// y = kept ? x / (1 − p) : 0 (0 everywhere when p == 1). When `mask` (uint8, x's shape) is
// defined it receives 1 for kept elements and 0 for dropped ones.
FREIGHT_KERNEL(dropout_forward, void(const Tensor& x, double p, uint64_t seed, uint64_t offset,
                                     Tensor& y, Tensor& mask));
// grad_x = mask ? grad_y · scale : 0.
FREIGHT_KERNEL(dropout_backward,
               void(const Tensor& grad_y, const Tensor& mask, double scale, Tensor& grad_x));
}  // namespace freight::kernels
