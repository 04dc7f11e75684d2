// Kernel slots of the elementwise family. Inputs are views of the same shape as the output
// (broadcast dimensions already expanded with stride 0); outputs are freshly allocated and
// contiguous unless stated. The slots the core calls too (fill, copy, binary, axpy) are declared
// in src/core/core_kernels.h.
#pragma once
#include "core/core_kernels.h"
#include "core/kernel.h"
#include "freight/tensor.h"
#include "freight/unary_ops.h"

namespace freight {

enum class ScalarOp : uint8_t { Mul, Add };

namespace kernels {
FREIGHT_KERNEL(scalar, void(ScalarOp op, const Tensor& a, double s, Tensor& out));
FREIGHT_KERNEL(unary, void(UnaryOp op, const Tensor& x, Tensor& y));
// gx = gy · dy/dx, from the input x or the output y, whichever the op's descriptor row says its
// backward keeps (freight/unary_ops.h: Saves). The op layer keeps only that one tensor and
// passes it in both slots (gy when the rule reads neither), so a rule must never read the other.
FREIGHT_KERNEL(unary_backward,
               void(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& gy, Tensor& gx));
}  // namespace kernels
}  // namespace freight
