// Kernel slot of the counters a training step keeps where the model runs (BatchNorm's
// num_batches_tracked). A kernel advances them, not a host write of a host-side count: so no step
// waits for a device read, and a step captured into a CUDA graph advances them at every replay
// with nothing for the host to patch afterwards.
#pragma once
#include <cstdint>

#include "core/kernel.h"
#include "freight/tensor.h"

namespace freight::kernels {
// counter[i] += amount for every element; `counter` is a contiguous int64 tensor.
FREIGHT_KERNEL(count_up, void(Tensor& counter, int64_t amount));
}  // namespace freight::kernels
