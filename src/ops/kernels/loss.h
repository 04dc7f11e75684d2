// Kernel slots of the loss family. Operands are contiguous; losses are scalars (shape []) of the
// input's dtype, and the gradient of a loss arrives as such a scalar on the same device.
#pragma once
#include "core/kernel.h"
#include "freight/tensor.h"

namespace freight::kernels {
// logits [N, C], labels int64 [N]: loss = mean over rows of logsumexp(row) − row[label], in one
// pass per row. When `probs` is defined it receives softmax(logits) [N, C] for the backward.
// A label outside [0, C) throws a freight::Error naming the label, its position and C.
FREIGHT_KERNEL(cross_entropy_forward,
               void(const Tensor& logits, const Tensor& labels, Tensor& probs, Tensor& loss));
// grad_logits = (probs − onehot(labels)) · grad_loss / N.
FREIGHT_KERNEL(cross_entropy_backward, void(const Tensor& probs, const Tensor& labels,
                                            const Tensor& grad_loss, Tensor& grad_logits));
// loss = mean((prediction − target)²) over all elements (same shapes).
FREIGHT_KERNEL(mse_loss_forward,
               void(const Tensor& prediction, const Tensor& target, Tensor& loss));
// grad_prediction = 2·(prediction − target)·grad_loss / numel and grad_target its negation;
// either output may be undefined (not needed) and is then skipped.
FREIGHT_KERNEL(mse_loss_backward,
               void(const Tensor& prediction, const Tensor& target, const Tensor& grad_loss,
                    Tensor& grad_prediction, Tensor& grad_target));
}  // namespace freight::kernels
