#include <fmt/format.h>

#include "freight/autograd.h"
#include "freight/error.h"
#include "freight/optim/optimizer.h"
#include "ops/kernels/optim.h"

namespace freight::optim {

SGD::SGD(std::vector<Tensor> params, double lr, double momentum, double dampening,
         double weight_decay, bool nesterov)
    : Optimizer("SGD", std::move(params), lr, {"momentum_buffer"}),
      momentum_(momentum),
      dampening_(dampening),
      weight_decay_(weight_decay),
      nesterov_(nesterov) {
  FREIGHT_CHECK(momentum >= 0, fmt::format("SGD: invalid momentum {}", momentum));
  FREIGHT_CHECK(weight_decay >= 0, fmt::format("SGD: invalid weight_decay {}", weight_decay));
  // Nesterov's look-ahead d + μ·b assumes b accumulates d undamped.
  FREIGHT_CHECK(!nesterov || (momentum > 0 && dampening == 0),
                fmt::format("SGD: nesterov needs momentum > 0 and dampening = 0 (got momentum {}, "
                            "dampening {})",
                            momentum, dampening));
}

// Fused backward (Optimizer::set_fused_backward): a linear layer's weight gradient arrives as
// its factors, and the backend's sgd_step_linear_weight applies this same update band by band of
// rows while each band of the gradient is in cache (or declines the shape).
std::shared_ptr<GradSink> SGD::make_grad_sink(size_t i) {
  const Tensor& p = params_[i];
  const DeviceType dev = p.device().type;
  if (p.dim() != 2 || !p.is_contiguous() || !kernels::sgd_step_linear_weight.has(dev))
    return nullptr;
  if (momentum_ != 0) {
    const Tensor& b = buffers_[0][i];
    if (b.defined() && (b.device() != p.device() || b.dtype() != p.dtype())) return nullptr;
  }
  auto sink = std::make_shared<GradSink>();
  sink->take_product = [this, i](const Tensor& gy, const Tensor& x) {
    const Tensor& p = params_[i];
    // The model may have moved since zero_grad() lent the sink.
    if (gy.device() != p.device() || !kernels::sgd_step_linear_weight.has(p.device().type))
      return false;
    Tensor buf;
    bool fresh = false;
    if (momentum_ != 0) {
      buf = buffers_[0][i];
      if (!buf.defined()) {  // the first update writes b = d before reading it
        buf = Tensor::empty(p.shape(), p.dtype(), p.device());
        fresh = true;
      }
    }
    Batch one;
    one.index.push_back(i);
    one.params.push_back(p);
    StepCounters counters = counters_for(one);
    if (!kernels::sgd_step_linear_weight(p.device().type, gy, x, p, buf, fresh, counters, config()))
      return false;
    if (fresh) buffers_[0][i] = buf;
    return true;
  };
  return sink;
}

SgdConfig SGD::config() const {
  SgdConfig cfg;
  cfg.momentum = momentum_;
  cfg.dampening = dampening_;
  cfg.weight_decay = weight_decay_;
  cfg.nesterov = nesterov_;
  return cfg;
}

void SGD::step() {
  // Parameters that a backward already updated through their sink are done; a gradient that a
  // later backward left them as well cannot join that update.
  std::vector<uint8_t> done(params_.size(), 0);
  for (size_t i = 0; i < sinks_.size(); ++i) {
    if (!sinks_[i] || !sinks_[i]->filled) continue;
    done[i] = 1;
    FREIGHT_CHECK(!params_[i].grad().defined(),
                  fmt::format("SGD: parameter {} (shape {}) was updated during a backward (fused "
                              "backward) and then got a gradient from another backward before "
                              "step(); accumulate gradients over several backwards with "
                              "set_fused_backward(false)",
                              i, shape_str(params_[i].shape())));
  }
  remove_grad_sinks(/*filled_too=*/true);  // spent: the next zero_grad() lends them again
  Batch b = gather(/*with_buffers=*/momentum_ != 0, &done);
  if (b.params.empty()) return;
  StepCounters counters = counters_for(b);
  static const std::vector<Tensor> none;
  kernels::sgd_step(b.params[0].device().type, b.params, b.grads,
                    b.buffers.empty() ? none : b.buffers[0], b.fresh, counters, config());
  commit(b);
}

}  // namespace freight::optim
