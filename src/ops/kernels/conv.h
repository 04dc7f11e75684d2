// Kernel slots of the convolution family (NCHW, no groups). All tensors are packed (contiguous)
// and outputs are allocated by the op; kernels write every output element.
#pragma once
#include <cstdint>

#include "core/kernel.h"
#include "freight/tensor.h"

namespace freight {

// The geometry of one 2-D convolution: input [n, c, h, w], weight [o, c, kh, kw], output
// [n, o, oh, ow] with oh = (h + 2·ph − dh·(kh − 1) − 1) / sh + 1 (and likewise ow).
struct Conv2dGeometry {
  int64_t n, c, h, w;
  int64_t o, kh, kw;
  int64_t oh, ow;
  int64_t sh, sw, ph, pw, dh, dw;
};

namespace kernels {
// y = conv(x, weight) + bias; bias [o] may be undefined (no bias). With `relu`, y = relu of that
// (relu's own rule: v < 0 ? 0 : v, a NaN passes), applied as the output is written (conv2d_relu
// in ops.h).
FREIGHT_KERNEL(conv2d_forward, void(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                    const Conv2dGeometry& g, bool relu, Tensor& y));
// gx = ∂L/∂x from gy = ∂L/∂y (the transposed convolution of gy with the weight).
FREIGHT_KERNEL(conv2d_backward_input,
               void(const Tensor& gy, const Tensor& weight, const Conv2dGeometry& g, Tensor& gx));
// gweight = Σ_images gy ⋆ x (correlation of the output gradient with the input); gbias =
// Σ gy over images and pixels. Either output may be undefined (not wanted). With `relu_output`
// defined (y of a conv2d_relu), gy is read masked by its sign, y > 0 ? gy : 0 (relu's backward),
// with the same values and sums as a masked copy would give.
FREIGHT_KERNEL(conv2d_backward_weight,
               void(const Tensor& gy, const Tensor& x, const Conv2dGeometry& g,
                    const Tensor& relu_output, Tensor& gweight, Tensor& gbias));
// Bytes a pass (0 forward, 1 input gradient, 2 weight gradient) of a layer with a bias takes
// from the device's allocator while it runs, beyond its operands and result: unrolled chunks,
// blocked copies, a library's scratch. For the planner's memory estimate (profile/plan.cpp).
FREIGHT_KERNEL(conv2d_workspace_bytes, int64_t(const Conv2dGeometry& g, int pass, DType dtype));
}  // namespace kernels
}  // namespace freight
