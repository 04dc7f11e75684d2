#include "training/train_step.h"

#include <vector>

#include "freight/autograd.h"
#include "freight/error.h"
#include "freight/nn/container.h"
#include "freight/training.h"
#include "ops/kernels/metrics.h"

namespace freight::detail {

TrainStep::TrainStep(nn::Module& model, const nn::ModelSpec& spec, optim::Optimizer& opt,
                     Device device, dist::Reducer* reducer)
    : model_(model), spec_(spec), opt_(opt), device_(device), reducer_(reducer) {
  sums_ = Tensor::zeros({2}, DType::F64, device_);
}

void TrainStep::reset_sums(double loss_sum, double correct) {
  if (loss_sum == 0 && correct == 0)
    sums_.zero_();
  else
    sums_.copy_(Tensor::from_vector(std::vector<double>{loss_sum, correct}, {2}));
}

TrainStep::Outputs TrainStep::operator()(const Tensor& x, const Tensor& y, double weight,
                                         bool first, bool last) {
  if (first) begin_group(last);
  if (reducer_ && last && !first) reducer_->release();
  Tensor out = model_(x);
  Tensor loss = model_loss(spec_, out, y);
  if (weight == 1.0)
    loss.backward();
  else
    loss.backward(Tensor::full(loss.shape(), weight, loss.dtype(), loss.device()));
  if (last) end_group();
  NoGradGuard no_grad;
  Outputs o{out.detach(), loss.detach()};
  Tensor rows = o.output.reshape({-1, o.output.size(-1)}).contiguous();
  kernels::accumulate_metrics(device_.type, rows, y.reshape({-1}).contiguous(), o.loss,
                              double(y.numel()), sums_);
  return o;
}

void TrainStep::begin_group(bool last) {
  if (reducer_) {
    reducer_->prepare();  // the gradients become views into the buckets, zeroed
    if (!last) reducer_->hold();
  } else {
    // Updates inside backward where the optimizer can fuse them (Optimizer::set_fused_backward),
    // when one backward makes the step: a group of several accumulates gradients first. (Data
    // parallelism needs them as gradients too, to sum them over the ranks.)
    opt_.set_fused_backward(last && nn::fusion_enabled());
    opt_.zero_grad();
  }
}

void TrainStep::end_group() {
  ++steps_;
  if (reducer_) reducer_->finish(steps_);
  opt_.step();
}

void TrainStep::idle_step(bool first, bool last) {
  FREIGHT_CHECK(reducer_, "TrainStep::idle_step: only a data-parallel step runs without rows");
  if (first) begin_group(last);
  if (last && !first) reducer_->release();
  if (last) end_group();
}

}  // namespace freight::detail
