// Tensors over memory that Freight did not allocate: a NumPy array's buffer, a PyTorch tensor
// handed over through DLPack. The tensor views that memory in place (writes through either side
// are seen by the other), and Freight never frees it: `release` runs once, on whichever thread
// drops the last tensor that views it, and hands the memory back to its owner.
#pragma once
#include <functional>

#include "freight/tensor.h"

namespace freight {

// A tensor of `shape` and `dtype` whose element (i0, i1, ...) is at data + Σ ik·strides[k]
// elements, on `device` (GPU memory must belong to that device). Strides must be >= 0 (a
// negative stride, as NumPy's a[::-1], is refused: copy such an array first). The tensor has no
// autograd history and does not require gradients. Errors name the shape and strides.
Tensor from_external(void* data, const Shape& shape, const Shape& strides, DType dtype,
                     Device device, std::function<void()> release);

// The stream Freight queues work for `device` on (a cudaStream_t on a GPU, as an integer, which
// is how DLPack's __dlpack__(stream=...) names streams); 0 on the CPU.
uintptr_t device_stream(Device device);

}  // namespace freight
