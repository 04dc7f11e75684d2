// Kernel slots the core itself calls: copies and fills for Tensor (to, copy_, fill_), and the
// sum and in-place accumulation of gradients for the autograd engine. They belong to the
// elementwise family (src/ops/kernels/elementwise.h includes this header, and the backends
// register them there); they are declared here so that the core needs nothing from the ops
// layer above it.
#pragma once
#include <cstdint>

#include "core/kernel.h"
#include "freight/tensor.h"

namespace freight {

// AddRelu: relu(a + b) (add_relu in ops.h), rounded as add then relu.
enum class BinaryOp : uint8_t { Add, Sub, Mul, Div, AddRelu };

namespace kernels {
// out[...] = value. `out` contiguous.
FREIGHT_KERNEL(fill, void(Tensor& out, double value));
// dst[...] = src[...], any strides on both sides, converting the dtype when they differ.
FREIGHT_KERNEL(copy, void(const Tensor& src, Tensor& dst));
// Inputs are views of the same shape as the output (broadcast dimensions already expanded with
// stride 0); `out` is freshly allocated and contiguous.
FREIGHT_KERNEL(binary, void(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out));
// y += alpha · x, both contiguous with the same shape (gradient accumulation).
FREIGHT_KERNEL(axpy, void(double alpha, const Tensor& x, Tensor& y));
}  // namespace kernels
}  // namespace freight
