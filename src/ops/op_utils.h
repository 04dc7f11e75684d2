// Helpers shared by the op implementations: operand checks, broadcasting, packing. Internal.
#pragma once
#include "freight/tensor.h"

namespace freight {
// The shape both operands broadcast to; the error names `op` and both shapes.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
// A stride-0 view of `x` with shape `s` (x must broadcast to s). Not recorded by autograd.
Tensor expand_view(const Tensor& x, const Shape& s);
// Checks that the operands of a binary op are defined and share a device and dtype.
void check_same_device_dtype(const Tensor& a, const Tensor& b, const char* op);
void check_floating(const Tensor& x, const char* op);
// `x` itself when contiguous, else a packed copy; never recorded (kernels take packed operands).
inline Tensor packed(const Tensor& x) { return x.is_contiguous() ? x : x.detach().contiguous(); }
}  // namespace freight
