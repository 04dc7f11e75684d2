// Kernel slots of the training metrics: accumulated where the model runs, so a GPU training step
// never waits for the host to read its loss (the CUDA trainer reads the sums once per log
// interval; a CUDA graph replays the accumulation with the rest of the step).
#pragma once
#include "core/kernel.h"
#include "freight/tensor.h"

namespace freight::kernels {
// output [R, C] (contiguous, floating), labels int64 [R], loss a one-element tensor of the
// output's dtype, sums float64 [2] on the same device:
//   sums[0] += double(loss) · weight
//   sums[1] += #{r : argmax(output[r]) == labels[r]}   (first maximum wins, as argmax)
// The count stays an exact integer in a double up to 2^53; its order of additions cannot
// change the result.
FREIGHT_KERNEL(accumulate_metrics, void(const Tensor& output, const Tensor& labels,
                                        const Tensor& loss, double weight, Tensor& sums));
}  // namespace freight::kernels
