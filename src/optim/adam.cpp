#include <fmt/format.h>

#include <cmath>

#include "freight/error.h"
#include "freight/optim/optimizer.h"
#include "ops/kernels/optim.h"

namespace freight::optim {

Adam::Adam(std::vector<Tensor> params, double lr, std::pair<double, double> betas, double eps,
           double weight_decay)
    : Adam("Adam", std::move(params), lr, betas, eps, weight_decay, false) {}

Adam::Adam(const char* name, std::vector<Tensor> params, double lr, std::pair<double, double> betas,
           double eps, double weight_decay, bool decoupled)
    : Optimizer(name, std::move(params), lr, {"exp_avg", "exp_avg_sq"}),
      beta1_(betas.first),
      beta2_(betas.second),
      eps_(eps),
      weight_decay_(weight_decay),
      decoupled_(decoupled) {
  FREIGHT_CHECK(beta1_ >= 0 && beta1_ < 1 && beta2_ >= 0 && beta2_ < 1,
                fmt::format("{}: betas must lie in [0, 1), got ({}, {})", name, beta1_, beta2_));
  FREIGHT_CHECK(eps >= 0, fmt::format("{}: invalid eps {}", name, eps));
  FREIGHT_CHECK(weight_decay >= 0, fmt::format("{}: invalid weight_decay {}", name, weight_decay));
}

void Adam::step() {
  Batch b = gather(/*with_buffers=*/true);
  if (b.params.empty()) return;
  AdamConfig cfg;
  cfg.beta1 = beta1_;
  cfg.beta2 = beta2_;
  cfg.eps = eps_;
  cfg.weight_decay = weight_decay_;
  cfg.decoupled = decoupled_;
  StepCounters counters = counters_for(b);
  kernels::adam_step(b.params[0].device().type, b.params, b.grads, b.buffers[0], b.buffers[1],
                     counters, cfg);
  commit(b);
}

AdamW::AdamW(std::vector<Tensor> params, double lr, std::pair<double, double> betas, double eps,
             double weight_decay)
    : Adam("AdamW", std::move(params), lr, betas, eps, weight_decay, true) {}

}  // namespace freight::optim
