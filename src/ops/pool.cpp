// 2-D max and average pooling over the last two dimensions of [N, C, H, W] (or [C, H, W]), as
// PyTorch's max_pool2d / avg_pool2d with dilation 1, floor mode and count_include_pad=True:
//   oh = (h + 2·ph − kh) / sh + 1  (likewise ow).
// Max pooling saves the argmax of each window, and its backward routes each output gradient to
// that one input element; average pooling spreads it evenly over the window (padding included
// in the divisor, so every window divides by kh·kw).
#include <fmt/format.h>

#include "core/autograd_node.h"
#include "freight/error.h"
#include "freight/ops.h"
#include "ops/kernels/pool.h"
#include "ops/op_utils.h"

namespace freight {

namespace {

std::string pair_str(Pair p) {
  return fmt::format("({}, {})", p[0], p[1]);
}

Pool2dGeometry pool_geometry(const Tensor& x, Pair kernel, Pair stride, Pair padding,
                             const char* op) {
  check_floating(x, op);
  FREIGHT_CHECK(
      x.dim() == 3 || x.dim() == 4,
      fmt::format("{}: input must be [N, C, H, W] or [C, H, W], got {}", op, shape_str(x.shape())));
  // A zero stride (the default) means stride = kernel, per dimension.
  for (int d = 0; d < 2; ++d)
    if (stride[d] == 0) stride[d] = kernel[d];
  FREIGHT_CHECK(kernel[0] >= 1 && kernel[1] >= 1 && stride[0] >= 1 && stride[1] >= 1,
                fmt::format("{}: kernel {} and stride {} must be positive (input {})", op,
                            pair_str(kernel), pair_str(stride), shape_str(x.shape())));
  // PyTorch's limit: beyond it a window could lie entirely in the padding.
  FREIGHT_CHECK(padding[0] >= 0 && padding[1] >= 0 && 2 * padding[0] <= kernel[0] &&
                    2 * padding[1] <= kernel[1],
                fmt::format("{}: padding {} must be >= 0 and at most half the kernel {}", op,
                            pair_str(padding), pair_str(kernel)));
  Pool2dGeometry g;
  g.h = x.size(-2), g.w = x.size(-1);
  g.planes = x.size(0) * (x.dim() == 4 ? x.size(1) : 1);
  g.kh = kernel[0], g.kw = kernel[1], g.sh = stride[0], g.sw = stride[1];
  g.ph = padding[0], g.pw = padding[1];
  FREIGHT_CHECK(g.h + 2 * g.ph >= g.kh && g.w + 2 * g.pw >= g.kw,
                fmt::format("{}: kernel {} is larger than the padded input {}x{} (input {}, "
                            "padding {})",
                            op, pair_str(kernel), g.h + 2 * g.ph, g.w + 2 * g.pw,
                            shape_str(x.shape()), pair_str(padding)));
  g.oh = (g.h + 2 * g.ph - g.kh) / g.sh + 1;
  g.ow = (g.w + 2 * g.pw - g.kw) / g.sw + 1;
  return g;
}

Shape pooled_shape(const Tensor& x, const Pool2dGeometry& g) {
  Shape s = x.shape();
  s[s.size() - 2] = g.oh;
  s.back() = g.ow;
  return s;
}

}  // namespace

namespace {

// max_pool2d(x); with relu Input max_pool2d(relu(x)), with relu Output relu(max_pool2d(x)), in
// one pass each way: the forward reads x through relu or writes y through it, and the backward's
// routing indices leave out the windows whose output is 0, where relu's gradient would be 0
// (kernels::max_pool2d_forward). Values and gradients equal the unfused pair's bit for bit: the
// maximum of relu'd values is the same number, found at the same first position (Input); relu
// of the maximum is relu's own output and stops where relu's gradient would (Output); and the
// gradient reaching an element is the same sum in the same order.
Tensor max_pool2d_impl(const Tensor& x, Pair kernel, Pair stride, Pair padding, PoolRelu relu,
                       const char* op) {
  Pool2dGeometry g = pool_geometry(x, kernel, stride, padding, op);
  FREIGHT_CHECK(
      g.h * g.w <= INT32_MAX,
      fmt::format("{}: planes of {} elements exceed the int32 argmax indices", op, g.h * g.w));
  DeviceType dev = x.device().type;
  Tensor xp = packed(x.detach());
  Shape out_shape = pooled_shape(x, g);
  Tensor y = Tensor::empty(out_shape, x.dtype(), x.device());
  Tensor idx = Tensor::empty(out_shape, DType::I32, x.device());
  if (y.numel() > 0) kernels::max_pool2d_forward(dev, xp, g, relu, y, idx);
  if (needs_grad({&x})) {
    Shape in_shape = x.shape();
    record(op, {x}, {y}, [idx, g, in_shape](const std::vector<Tensor>& go) {
      Tensor gy = packed(go[0]);
      Tensor gx = Tensor::empty(in_shape, gy.dtype(), gy.device());
      if (gx.numel() > 0) {
        if (gy.numel() > 0)
          kernels::max_pool2d_backward(gy.device().type, gy, idx, g, gx);
        else
          gx.zero_();
      }
      return std::vector<Tensor>{gx};
    });
  }
  return y;
}

}  // namespace

Tensor max_pool2d(const Tensor& x, Pair kernel, Pair stride, Pair padding) {
  return max_pool2d_impl(x, kernel, stride, padding, PoolRelu::None, "max_pool2d");
}

Tensor relu_max_pool2d(const Tensor& x, Pair kernel, Pair stride, Pair padding) {
  return max_pool2d_impl(x, kernel, stride, padding, PoolRelu::Input, "relu_max_pool2d");
}

Tensor max_pool2d_relu(const Tensor& x, Pair kernel, Pair stride, Pair padding) {
  return max_pool2d_impl(x, kernel, stride, padding, PoolRelu::Output, "max_pool2d_relu");
}

namespace {

// avg_pool2d(x), or with `relu` avg_pool2d(relu(x)) in one pass each way: the forward reads x
// through relu, and the backward applies relu's selection (x > 0) to each input element's
// gradient as it writes it, from the saved x (what the unfused ReLU would have kept, its output,
// is the same size). Values and gradients equal the unfused pair's bit for bit: the same sums
// of the same relu'd values, then relu's own select.
Tensor avg_pool2d_impl(const Tensor& x, Pair kernel, Pair stride, Pair padding, bool relu,
                       const char* op) {
  Pool2dGeometry g = pool_geometry(x, kernel, stride, padding, op);
  DeviceType dev = x.device().type;
  Tensor xp = packed(x.detach());
  Tensor y = Tensor::empty(pooled_shape(x, g), x.dtype(), x.device());
  if (y.numel() > 0) kernels::avg_pool2d_forward(dev, xp, g, relu, y);
  if (needs_grad({&x})) {
    Shape in_shape = x.shape();
    Tensor mask_source = relu ? xp : Tensor();
    record(op, {x}, {y}, [g, in_shape, mask_source](const std::vector<Tensor>& go) {
      Tensor gy = packed(go[0]);
      Tensor gx = Tensor::empty(in_shape, gy.dtype(), gy.device());
      if (gx.numel() > 0) {
        if (gy.numel() > 0)
          kernels::avg_pool2d_backward(gy.device().type, gy, g, mask_source, gx);
        else
          gx.zero_();
      }
      return std::vector<Tensor>{gx};
    });
  }
  return y;
}

}  // namespace

Tensor avg_pool2d(const Tensor& x, Pair kernel, Pair stride, Pair padding) {
  return avg_pool2d_impl(x, kernel, stride, padding, false, "avg_pool2d");
}

Tensor relu_avg_pool2d(const Tensor& x, Pair kernel, Pair stride, Pair padding) {
  return avg_pool2d_impl(x, kernel, stride, padding, true, "relu_avg_pool2d");
}

}  // namespace freight
