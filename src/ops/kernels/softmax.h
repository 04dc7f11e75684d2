// Kernel slots of the softmax family. Operands are contiguous and viewed as [outer, n, inner]:
// the softmax runs along the middle axis (inner == 1 is the common last-dimension case).
#pragma once
#include "core/kernel.h"
#include "freight/tensor.h"

namespace freight::kernels {
// y = softmax(x) along the middle axis, or log_softmax(x) when `log`. Stable: the maximum of
// each slice is subtracted before exponentiating.
FREIGHT_KERNEL(softmax_forward,
               void(const Tensor& x, int64_t outer, int64_t n, int64_t inner, bool log, Tensor& y));
// From the forward output y and the output gradient gy:
//   softmax:      gx = y ⊙ (gy − Σ gy⊙y)
//   log_softmax:  gx = gy − exp(y) · Σ gy
// with the sums along the middle axis.
FREIGHT_KERNEL(softmax_backward, void(const Tensor& y, const Tensor& gy, int64_t outer, int64_t n,
                                      int64_t inner, bool log, Tensor& gx));
}  // namespace freight::kernels
