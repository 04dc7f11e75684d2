#include <fmt/format.h>

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

void SGD::step() {
  Batch b = gather(/*with_buffers=*/momentum_ != 0);
  if (b.params.empty()) return;
  SgdConfig cfg;
  cfg.momentum = momentum_;
  cfg.dampening = dampening_;
  cfg.weight_decay = weight_decay_;
  cfg.nesterov = nesterov_;
  StepCounters counters = counters_for(b);
  static const std::vector<Tensor> none;
  kernels::sgd_step(b.params[0].device().type, b.params, b.grads,
                    b.buffers.empty() ? none : b.buffers[0], b.fresh, counters, cfg);
  commit(b);
}

}  // namespace freight::optim
