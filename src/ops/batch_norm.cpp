// Batch normalisation over dimension 1 of [N, C], [N, C, L] or [N, C, H, W], as PyTorch's
// batch_norm:
//   y = (x − μ)/√(σ² + eps) · γ + β,   statistics per channel over all other dimensions.
// Training uses the batch mean and biased variance, and updates the running statistics in place
// with the unbiased variance (PyTorch's convention):
//   running_mean ← (1 − momentum)·running_mean + momentum·μ
//   running_var  ← (1 − momentum)·running_var  + momentum·σ²·m/(m − 1),  m = N·L (or N·H·W).
// Evaluation uses the running statistics, so y is a per-channel affine map of x.
// batch_norm_relu fuses a ReLU after it: its kernels clamp y at 0 as they write it, and mask the
// incoming gradient with y > 0 as they read it (y recomputed from x, so nothing more is kept).
#include <fmt/format.h>

#include "core/autograd_node.h"
#include "freight/error.h"
#include "freight/ops.h"
#include "ops/kernels/norm.h"
#include "ops/op_utils.h"

namespace freight {

namespace {
// Checks an optional per-channel tensor: defined ones must be [c] on x's device and dtype.
void check_channel_tensor(const Tensor& t, const Tensor& x, int64_t c, const char* what) {
  if (!t.defined()) return;
  check_same_device_dtype(x, t, "batch_norm");
  FREIGHT_CHECK(t.dim() == 1 && t.size(0) == c,
                fmt::format("batch_norm: {} {} does not match the {} channels of input {} "
                            "(expected [{}])",
                            what, shape_str(t.shape()), c, shape_str(x.shape()), c));
}
}  // namespace

namespace {
Tensor batch_norm_op(const Tensor& x, const Tensor& weight, const Tensor& bias,
                     const Tensor& running_mean, const Tensor& running_var, bool training,
                     double momentum, double eps, bool relu) {
  check_floating(x, "batch_norm");
  FREIGHT_CHECK(x.dim() >= 2 && x.dim() <= 4,
                fmt::format("batch_norm: input must be [N, C], [N, C, L] or [N, C, H, W], got {}",
                            shape_str(x.shape())));
  const int64_t n = x.size(0), c = x.size(1), s = x.numel() / std::max<int64_t>(1, n * c);
  check_channel_tensor(weight, x, c, "weight");
  check_channel_tensor(bias, x, c, "bias");
  check_channel_tensor(running_mean, x, c, "running_mean");
  check_channel_tensor(running_var, x, c, "running_var");
  FREIGHT_CHECK(running_mean.defined() == running_var.defined(),
                "batch_norm: running_mean and running_var must be both given or both omitted");
  FREIGHT_CHECK(eps > 0, fmt::format("batch_norm: eps must be positive, got {}", eps));
  const int64_t count = n * s;  // values per channel
  DeviceType dev = x.device().type;
  Tensor xp = packed(x.detach());
  Tensor wp = weight.defined() ? packed(weight.detach()) : Tensor();
  Tensor bp = bias.defined() ? packed(bias.detach()) : Tensor();
  Tensor mean, invstd;
  if (training) {
    FREIGHT_CHECK(count > 1,
                  fmt::format("batch_norm: training needs more than one value per channel, got "
                              "input {}",
                              shape_str(x.shape())));
    mean = Tensor::empty({c}, x.dtype(), x.device());
    invstd = Tensor::empty({c}, x.dtype(), x.device());
    Tensor var = Tensor::empty({c}, x.dtype(), x.device());
    if (c > 0) kernels::batch_norm_stats(dev, xp, n, c, s, eps, mean, var, invstd);
    if (running_mean.defined() && c > 0) {
      FREIGHT_CHECK(running_mean.is_contiguous() && running_var.is_contiguous(),
                    "batch_norm: running statistics must be contiguous (they are updated in "
                    "place)");
      Tensor rm = running_mean.detach(), rv = running_var.detach();
      kernels::batch_norm_update_running(dev, mean, var, momentum, count, rm, rv);
    }
  } else {
    FREIGHT_CHECK(running_mean.defined(),
                  fmt::format("batch_norm: evaluation needs running_mean and running_var (input "
                              "{})",
                              shape_str(x.shape())));
    mean = packed(running_mean.detach());
    invstd = Tensor::empty({c}, x.dtype(), x.device());
    if (c > 0) kernels::batch_norm_invstd(dev, packed(running_var.detach()), eps, invstd);
  }
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (y.numel() > 0) kernels::batch_norm_forward(dev, xp, mean, invstd, wp, bp, n, c, s, relu, y);

  if (needs_grad({&x, &weight, &bias})) {
    const bool gx = x.requires_grad();
    const bool gw = weight.defined() && weight.requires_grad();
    const bool gb = bias.defined() && bias.requires_grad();
    std::vector<Tensor> inputs{x};
    if (weight.defined()) inputs.push_back(weight);
    if (bias.defined()) inputs.push_back(bias);
    const size_t wi = 1, bi = weight.defined() ? 2 : 1;
    // In evaluation `mean` is the caller's running_mean, which later training steps update in
    // place: keep a copy so that this graph's gradient uses the statistics of its forward.
    Tensor smean = training ? mean : mean.clone();
    // A fused ReLU's backward recomputes the sign of y from x, the statistics, weight and bias.
    Tensor rbp = relu ? bp : Tensor();
    record(relu ? "batch_norm_relu" : "batch_norm", inputs, {y},
           [xp, smean, invstd, wp, rbp, relu, training, n, c, s, gx, gw, gb, wi, bi,
            n_inputs = inputs.size()](const std::vector<Tensor>& go) {
             Tensor gy = packed(go[0]);
             std::vector<Tensor> r(n_inputs);
             Tensor dx = gx ? Tensor::empty(gy.shape(), gy.dtype(), gy.device()) : Tensor();
             Tensor dw = gw ? Tensor::empty({c}, gy.dtype(), gy.device()) : Tensor();
             Tensor db = gb ? Tensor::empty({c}, gy.dtype(), gy.device()) : Tensor();
             kernels::batch_norm_backward(gy.device().type, gy, xp, smean, invstd, wp, rbp, relu,
                                          training, n, c, s, dx, dw, db);
             if (gx) r[0] = dx;
             if (gw) r[wi] = dw;
             if (gb) r[bi] = db;
             return r;
           });
  }
  return y;
}
}  // namespace

Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias,
                  const Tensor& running_mean, const Tensor& running_var, bool training,
                  double momentum, double eps) {
  return batch_norm_op(x, weight, bias, running_mean, running_var, training, momentum, eps, false);
}

Tensor batch_norm_relu(const Tensor& x, const Tensor& weight, const Tensor& bias,
                       const Tensor& running_mean, const Tensor& running_var, bool training,
                       double momentum, double eps) {
  return batch_norm_op(x, weight, bias, running_mean, running_var, training, momentum, eps, true);
}

}  // namespace freight
