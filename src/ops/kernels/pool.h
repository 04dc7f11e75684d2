// Kernel slots of the 2-D pooling family. Tensors are packed; the input is viewed as `planes`
// independent [h, w] planes (N·C of them) and the output as the same number of [oh, ow] planes.
#pragma once
#include <cstdint>

#include "core/kernel.h"
#include "freight/tensor.h"

namespace freight {

// Window (i, j) of a plane covers rows i·sh − ph + [0, kh) and columns j·sw − pw + [0, kw);
// the parts outside the plane are padding.
struct Pool2dGeometry {
  int64_t planes, h, w;
  int64_t oh, ow;
  int64_t kh, kw, sh, sw, ph, pw;
};

// Where max_pool2d_forward applies a ReLU fused with the pooling (below).
enum class PoolRelu : uint8_t { None, Input, Output };

namespace kernels {
// y = the maximum of each window (padding counts as −∞); indices (int32) = the position
// r·w + c within its input plane of the first maximum in row-major window order. A NaN in a
// window is its maximum (it propagates, as in PyTorch).
// A ReLU fused with it (PoolRelu):
//  * Input: the window is read through relu(v) = v < 0 ? 0 : v (relu's own rule; a NaN passes
//    and wins): y is max_pool2d(relu(x)) (relu_max_pool2d in ops.h);
//  * Output: the maximum is taken as without relu (a NaN propagates) and written through relu:
//    y is relu(max_pool2d(x)) (max_pool2d_relu in ops.h).
// Either way a window whose output is <= 0 gets index −1, because relu's gradient stops there
// (it passes where the output is positive or NaN). The two give the same numbers (the maximum
// commutes with relu).
FREIGHT_KERNEL(max_pool2d_forward, void(const Tensor& x, const Pool2dGeometry& g, PoolRelu relu,
                                        Tensor& y, Tensor& indices));
// gx = 0, then gx[plane][indices] += gy (windows may overlap); an index of −1 routes nothing.
FREIGHT_KERNEL(max_pool2d_backward,
               void(const Tensor& gy, const Tensor& indices, const Pool2dGeometry& g, Tensor& gx));
// y = the sum of each window / (kh·kw): padding counts as zeros in the divisor too. With
// `relu`, the window is read through relu(v) = v < 0 ? 0 : v (relu's own rule; a NaN passes):
// y is avg_pool2d(relu(x)) (relu_avg_pool2d in ops.h).
FREIGHT_KERNEL(avg_pool2d_forward,
               void(const Tensor& x, const Pool2dGeometry& g, bool relu, Tensor& y));
// gx[p] = Σ over the windows containing p of gy / (kh·kw). With `relu_input` defined (the x of a
// relu forward), then gx[p] = x[p] <= 0 ? 0 : gx[p]: relu's backward on the way out, as its own
// kernel would select (an element whose input was <= 0 gets 0, whatever its sum; NaN passes).
FREIGHT_KERNEL(avg_pool2d_backward, void(const Tensor& gy, const Pool2dGeometry& g,
                                         const Tensor& relu_input, Tensor& gx));
}  // namespace kernels
}  // namespace freight
