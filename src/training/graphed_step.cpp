#include "training/graphed_step.h"

namespace freight::detail {

GraphedStep::GraphedStep(TrainStep& step, int64_t warmup) : step_(step), warmup_(warmup) {}

GraphedStep::~GraphedStep() {
  graph_.reset();  // waits for its last replay, then gives its pool back
}

bool GraphedStep::full_batch(const Tensor& x, const Tensor& y) {
  if (graph_) {
    replay(x, y);
    return true;
  }
  if (eager_steps_ < warmup_) {
    step_(x, y);
    ++eager_steps_;
    return false;
  }
  const Device device = step_.device();
  static_x_ = Tensor::empty(x.shape(), x.dtype(), device);
  static_y_ = Tensor::empty(y.shape(), y.dtype(), device);
  static_x_.copy_(x);
  static_y_.copy_(y);
  graph_ = backend_for(device.type).capture(device.index, [&] {
    captured_ = step_(static_x_, static_y_);
  });
  // The capture recorded the step's device work without running it; this first replay runs it.
  graph_->replay();
  return true;
}

void GraphedStep::replay(const Tensor& x, const Tensor& y) {
  if (x.defined()) {
    static_x_.copy_(x);
    static_y_.copy_(y);
  }
  graph_->replay();
}

}  // namespace freight::detail
