// Losses, each a mean over the batch returning a scalar (shape []): cross_entropy (log-softmax
// and negative log-likelihood fused; the softmax probabilities are saved for a backward that is
// a single subtraction) and mse_loss (one pass forward, one pass backward).
#include <fmt/format.h>

#include "core/autograd_node.h"
#include "freight/error.h"
#include "freight/ops.h"
#include "ops/kernels/loss.h"
#include "ops/op_utils.h"

namespace freight {

Tensor cross_entropy(const Tensor& logits, const Tensor& labels) {
  FREIGHT_CHECK(logits.defined() && labels.defined(), "cross_entropy: undefined operand");
  check_floating(logits, "cross_entropy");
  FREIGHT_CHECK(logits.dim() == 2, fmt::format("cross_entropy: logits must be 2-D [N, C], got {}",
                                               shape_str(logits.shape())));
  FREIGHT_CHECK(labels.dtype() == DType::I64,
                fmt::format("cross_entropy: labels must be int64 class indices, got {} of shape {}",
                            dtype_name(labels.dtype()), shape_str(labels.shape())));
  FREIGHT_CHECK(
      labels.dim() == 1 && labels.size(0) == logits.size(0),
      fmt::format("cross_entropy: labels {} do not match logits {} (expected labels [{}])",
                  shape_str(labels.shape()), shape_str(logits.shape()), logits.size(0)));
  FREIGHT_CHECK(logits.device() == labels.device(),
                fmt::format("cross_entropy: logits on {} and labels on {}; move one with "
                            ".to(device)",
                            logits.device().str(), labels.device().str()));

  Tensor x = packed(logits), l = packed(labels);
  bool grad = needs_grad({&logits});
  Tensor probs = grad ? Tensor::empty(x.shape(), x.dtype(), x.device()) : Tensor();
  Tensor loss = Tensor::empty({}, x.dtype(), x.device());
  kernels::cross_entropy_forward(x.device().type, x, l, probs, loss);
  if (grad) {
    Tensor sp = probs.detach(), sl = l.detach();
    record("cross_entropy", {logits, labels}, {loss}, [sp, sl](const std::vector<Tensor>& g) {
      Tensor gx = Tensor::empty(sp.shape(), sp.dtype(), sp.device());
      if (gx.numel() > 0)
        kernels::cross_entropy_backward(sp.device().type, sp, sl, packed(g[0]), gx);
      return std::vector<Tensor>{gx, Tensor()};
    });
  }
  return loss;
}

Tensor mse_loss(const Tensor& prediction, const Tensor& target) {
  check_same_device_dtype(prediction, target, "mse_loss");
  check_floating(prediction, "mse_loss");
  FREIGHT_CHECK(prediction.shape() == target.shape(),
                fmt::format("mse_loss: prediction {} and target {} must have the same shape",
                            shape_str(prediction.shape()), shape_str(target.shape())));
  Tensor p = packed(prediction), t = packed(target);
  Tensor loss = Tensor::empty({}, p.dtype(), p.device());
  kernels::mse_loss_forward(p.device().type, p, t, loss);
  if (needs_grad({&prediction, &target})) {
    bool gp = prediction.requires_grad(), gt = target.requires_grad();
    Tensor sp = p.detach(), st = t.detach();
    record("mse_loss", {prediction, target}, {loss},
           [sp, st, gp, gt](const std::vector<Tensor>& g) {
             Tensor dp = gp ? Tensor::empty(sp.shape(), sp.dtype(), sp.device()) : Tensor();
             Tensor dt = gt ? Tensor::empty(st.shape(), st.dtype(), st.device()) : Tensor();
             if (sp.numel() > 0)
               kernels::mse_loss_backward(sp.device().type, sp, st, packed(g[0]), dp, dt);
             return std::vector<Tensor>{dp, dt};
           });
  }
  return loss;
}

}  // namespace freight
