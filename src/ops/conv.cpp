// 2-D convolution (NCHW, no groups), as PyTorch's conv2d: a cross-correlation
//   y[n, o, i, j] = b[o] + Σ_{c, p, q} x[n, c, i·sh − ph + p·dh, j·sw − pw + q·dw] · w[o, c, p, q]
// with zeros outside the input. Backward:
//   ∂L/∂x = the transposed convolution of gy with w (every y element scatters back through the
//           weight to the input pixels it read),
//   ∂L/∂w = Σ_n correlation of gy[n] with x[n],   ∂L/∂b = Σ_{n, i, j} gy.
#include <fmt/format.h>

#include <algorithm>

#include "core/autograd_node.h"
#include "freight/error.h"
#include "freight/ops.h"
#include "ops/kernels/conv.h"
#include "ops/kernels/elementwise.h"
#include "ops/op_utils.h"

namespace freight {

namespace {

std::string pair_str(Pair p) {
  return fmt::format("({}, {})", p[0], p[1]);
}

// The geometry from the shapes, with the shape checks (the input's and weight's ranks and
// channels, stride, dilation, padding, the kernel fitting the padded input).
Conv2dGeometry conv_geometry(const Shape& x, const Shape& weight, Pair stride, Pair padding,
                             Pair dilation) {
  FREIGHT_CHECK(x.size() == 4,
                fmt::format("conv2d: input must be 4-D [N, C, H, W], got {}", shape_str(x)));
  FREIGHT_CHECK(weight.size() == 4, fmt::format("conv2d: weight must be 4-D [O, C, kh, kw], got {}",
                                                shape_str(weight)));
  FREIGHT_CHECK(x[1] == weight[1],
                fmt::format("conv2d: input {} has {} channels but weight {} expects {} (weight is "
                            "[out_channels, in_channels, kh, kw])",
                            shape_str(x), x[1], shape_str(weight), weight[1]));
  FREIGHT_CHECK(stride[0] >= 1 && stride[1] >= 1 && dilation[0] >= 1 && dilation[1] >= 1 &&
                    padding[0] >= 0 && padding[1] >= 0,
                fmt::format("conv2d: stride {} and dilation {} must be >= 1 and padding {} >= 0",
                            pair_str(stride), pair_str(dilation), pair_str(padding)));
  FREIGHT_CHECK(weight[2] >= 1 && weight[3] >= 1,
                fmt::format("conv2d: empty kernel in weight {}", shape_str(weight)));
  Conv2dGeometry g;
  g.n = x[0], g.c = x[1], g.h = x[2], g.w = x[3];
  g.o = weight[0], g.kh = weight[2], g.kw = weight[3];
  g.sh = stride[0], g.sw = stride[1], g.ph = padding[0], g.pw = padding[1];
  g.dh = dilation[0], g.dw = dilation[1];
  // Extent of the dilated kernel; it must fit in the padded input at least once.
  int64_t eh = g.dh * (g.kh - 1) + 1, ew = g.dw * (g.kw - 1) + 1;
  FREIGHT_CHECK(eh <= g.h + 2 * g.ph && ew <= g.w + 2 * g.pw,
                fmt::format("conv2d: kernel {}x{} (dilation {}, extent {}x{}) is larger than the "
                            "padded input {}x{} (input {}, padding {})",
                            g.kh, g.kw, pair_str(dilation), eh, ew, g.h + 2 * g.ph, g.w + 2 * g.pw,
                            shape_str(x), pair_str(padding)));
  g.oh = (g.h + 2 * g.ph - eh) / g.sh + 1;
  g.ow = (g.w + 2 * g.pw - ew) / g.sw + 1;
  return g;
}

Conv2dGeometry conv_geometry(const Tensor& x, const Tensor& weight, const Tensor& bias, Pair stride,
                             Pair padding, Pair dilation) {
  Conv2dGeometry g = conv_geometry(x.shape(), weight.shape(), stride, padding, dilation);
  if (bias.defined()) {
    check_same_device_dtype(x, bias, "conv2d");
    FREIGHT_CHECK(bias.dim() == 1 && bias.size(0) == weight.size(0),
                  fmt::format("conv2d: bias {} does not match weight {} (expected [{}])",
                              shape_str(bias.shape()), shape_str(weight.shape()), weight.size(0)));
  }
  return g;
}

}  // namespace

int64_t conv2d_workspace_bytes(const Shape& x, const Shape& weight, Pair stride, Pair padding,
                               Pair dilation, DType dtype, Device device, bool input_grad) {
  const Conv2dGeometry g = conv_geometry(x, weight, stride, padding, dilation);
  if (g.n * g.o * g.oh * g.ow == 0 || g.c == 0) return 0;  // no pass runs a kernel
  const auto& slot = kernels::conv2d_workspace_bytes;
  if (!slot.has(device.type)) return 0;
  int64_t most = 0;
  for (int pass = 0; pass < 3; ++pass)
    if (pass != 1 || input_grad) most = std::max(most, slot(device.type, g, pass, dtype));
  return most;
}

namespace {

// The gradients of conv2d's inputs (x, weight, then bias when it has one) from the output's, go,
// masked by the sign of the kept output sy where a ReLU was fused (relu's own backward): in a
// pass of its own before both passes when the input needs a gradient, else by the weight
// gradient's kernel as it reads go (a network's first layer).
std::vector<Tensor> conv2d_backward(const Tensor& go, const Tensor& sx, const Tensor& sy,
                                    const Tensor& wp, const Conv2dGeometry& g, bool gx, bool gw,
                                    bool gb, size_t n_inputs) {
  Tensor gy = packed(go);
  DeviceType dev = gy.device().type;
  Tensor mask = sy;
  if (mask.defined() && gx && gy.numel() > 0) {
    Tensor masked = Tensor::empty(gy.shape(), gy.dtype(), gy.device());
    kernels::unary_backward(dev, UnaryOp::Relu, mask, mask, gy, masked);
    gy = masked;
    mask = Tensor();
  }
  std::vector<Tensor> r(n_inputs);
  if (gx) {
    r[0] = Tensor::empty({g.n, g.c, g.h, g.w}, gy.dtype(), gy.device());
    if (r[0].numel() > 0) {
      if (gy.numel() > 0)
        kernels::conv2d_backward_input(dev, gy, wp, g, r[0]);
      else
        r[0].zero_();
    }
  }
  if (gw || gb) {
    Tensor dw = gw ? Tensor::empty(wp.shape(), gy.dtype(), gy.device()) : Tensor();
    Tensor db = gb ? Tensor::empty({g.o}, gy.dtype(), gy.device()) : Tensor();
    if (gy.numel() > 0) {
      Tensor xs = sx;
      kernels::conv2d_backward_weight(dev, gy, xs, g, mask, dw, db);
    } else {
      if (dw.defined()) dw.zero_();
      if (db.defined()) db.zero_();
    }
    if (gw) r[1] = dw;
    if (gb) r[2] = db;
  }
  return r;
}

// conv2d, or with `relu` relu(conv2d(...)) (conv2d_relu): the forward kernels apply the ReLU as
// they write y, and the backward first masks the incoming gradient by y's sign (relu's own
// backward, from the kept y), then runs the convolution's passes on it. Values and gradients are
// the pair's bit for bit.
Tensor conv2d_impl(const Tensor& x, const Tensor& weight, const Tensor& bias, Pair stride,
                   Pair padding, Pair dilation, bool relu) {
  check_same_device_dtype(x, weight, "conv2d");
  check_floating(x, "conv2d");
  Conv2dGeometry g = conv_geometry(x, weight, bias, stride, padding, dilation);
  DeviceType dev = x.device().type;
  Tensor xp = packed(x.detach()), wp = packed(weight.detach());
  Tensor bp = bias.defined() ? packed(bias.detach()) : Tensor();
  Tensor y = Tensor::empty({g.n, g.o, g.oh, g.ow}, x.dtype(), x.device());
  if (y.numel() > 0) kernels::conv2d_forward(dev, xp, wp, bp, g, relu, y);

  if (needs_grad({&x, &weight, &bias})) {
    bool gx = x.requires_grad(), gw = weight.requires_grad();
    bool gb = bias.defined() && bias.requires_grad();
    std::vector<Tensor> inputs{x, weight};
    if (bias.defined()) inputs.push_back(bias);
    size_t n_inputs = inputs.size();
    // The input is saved only when the weight gradient needs it.
    Tensor sx = gw ? xp : Tensor();
    Tensor sy = relu ? y.detach() : Tensor();  // relu's mask
    record(relu ? "conv2d_relu" : "conv2d", inputs, {y},
           [sx, sy, wp, g, gx, gw, gb, n_inputs](const std::vector<Tensor>& go) {
             return conv2d_backward(go[0], sx, sy, wp, g, gx, gw, gb, n_inputs);
           });
  }
  return y;
}

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, Pair stride, Pair padding,
              Pair dilation) {
  return conv2d_impl(x, weight, bias, stride, padding, dilation, false);
}

Tensor conv2d_relu(const Tensor& x, const Tensor& weight, const Tensor& bias, Pair stride,
                   Pair padding, Pair dilation) {
  return conv2d_impl(x, weight, bias, stride, padding, dilation, true);
}

}  // namespace freight
