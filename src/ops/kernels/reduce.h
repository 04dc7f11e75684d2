// Kernel slots of the reduction family.
#pragma once
#include "core/kernel.h"
#include "freight/tensor.h"

namespace freight::kernels {
// x contiguous, viewed as [outer, reduced, inner]; out contiguous [outer, inner] (sum over the
// middle axis). The full sum is outer = inner = 1.
FREIGHT_KERNEL(sum_axis, void(const Tensor& x, int64_t outer, int64_t reduced, int64_t inner,
                              Tensor& out));
// Index of the largest element along the middle axis of [outer, reduced, inner]; out int64.
FREIGHT_KERNEL(argmax_axis, void(const Tensor& x, int64_t outer, int64_t reduced, int64_t inner,
                                 Tensor& out));
}  // namespace freight::kernels
