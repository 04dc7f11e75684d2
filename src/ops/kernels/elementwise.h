// Kernel slots of the elementwise family. Inputs are views of the same shape as the output
// (broadcast dimensions already expanded with stride 0); outputs are freshly allocated and
// contiguous unless stated.
#pragma once
#include "core/kernel.h"
#include "freight/tensor.h"
#include "freight/unary_ops.h"

namespace freight {

enum class BinaryOp : uint8_t { Add, Sub, Mul, Div };
enum class ScalarOp : uint8_t { Mul, Add };

namespace kernels {
// out[...] = value. `out` contiguous.
FREIGHT_KERNEL(fill, void(Tensor& out, double value));
// dst[...] = src[...], any strides on both sides, converting the dtype when they differ.
FREIGHT_KERNEL(copy, void(const Tensor& src, Tensor& dst));
FREIGHT_KERNEL(binary, void(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out));
FREIGHT_KERNEL(scalar, void(ScalarOp op, const Tensor& a, double s, Tensor& out));
FREIGHT_KERNEL(unary, void(UnaryOp op, const Tensor& x, Tensor& y));
// gx = gy · dy/dx, from the input x or the output y, whichever the op's descriptor row says its
// backward keeps (freight/unary_ops.h: Saves). The op layer keeps only that one tensor and
// passes it in both slots (gy when the rule reads neither), so a rule must never read the other.
FREIGHT_KERNEL(unary_backward,
               void(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& gy, Tensor& gx));
// y += alpha · x, both contiguous with the same shape (gradient accumulation).
FREIGHT_KERNEL(axpy, void(double alpha, const Tensor& x, Tensor& y));
}  // namespace kernels
}  // namespace freight
