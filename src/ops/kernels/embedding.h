// Kernel slots of the embedding family. Operands are contiguous; indices are int64 and viewed as
// a flat list of n lookups into weight [num, dim].
#pragma once
#include "core/kernel.h"
#include "freight/tensor.h"

namespace freight::kernels {
// out[i, :] = weight[indices[i], :]; out is [n, dim]. An index outside [0, num) throws a
// freight::Error naming embedding, the index, its position and num.
FREIGHT_KERNEL(embedding_forward, void(const Tensor& indices, const Tensor& weight, Tensor& out));
// grad_weight = 0, then grad_weight[indices[i], :] += grad_out[i, :] for every i (repeated
// indices accumulate). grad_out is [n, dim], grad_weight [num, dim].
FREIGHT_KERNEL(embedding_backward,
               void(const Tensor& indices, const Tensor& grad_out, Tensor& grad_weight));
}  // namespace freight::kernels
