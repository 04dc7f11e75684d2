#include "training/train_step.h"

#include <vector>

#include "freight/autograd.h"
#include "freight/training.h"
#include "ops/kernels/metrics.h"

namespace freight::detail {

TrainStep::TrainStep(nn::Module& model, const nn::ModelSpec& spec, optim::Optimizer& opt,
                     Device device)
    : model_(model), spec_(spec), opt_(opt), device_(device) {
  sums_ = Tensor::zeros({2}, DType::F64, device_);
}

void TrainStep::reset_sums(double loss_sum, double correct) {
  if (loss_sum == 0 && correct == 0)
    sums_.zero_();
  else
    sums_.copy_(Tensor::from_vector(std::vector<double>{loss_sum, correct}, {2}));
}

TrainStep::Outputs TrainStep::operator()(const Tensor& x, const Tensor& y) {
  opt_.zero_grad();
  Tensor out = model_(x);
  Tensor loss = model_loss(spec_, out, y);
  loss.backward();
  opt_.step();
  NoGradGuard no_grad;
  Outputs o{out.detach(), loss.detach()};
  Tensor rows = o.output.reshape({-1, o.output.size(-1)}).contiguous();
  kernels::accumulate_metrics(device_.type, rows, y.reshape({-1}).contiguous(), o.loss,
                              double(y.numel()), sums_);
  return o;
}

}  // namespace freight::detail
