// BatchNorm1d / BatchNorm2d.
#include <fmt/format.h>

#include "freight/error.h"
#include "freight/nn/layers.h"
#include "freight/ops.h"
#include "ops/kernels/counters.h"

namespace freight::nn {

BatchNorm::BatchNorm(const char* type_name, int64_t min_rank, int64_t max_rank,
                     int64_t num_features, double eps, double momentum)
    : Module(type_name),
      min_rank_(min_rank),
      max_rank_(max_rank),
      channels_(num_features),
      eps_(eps),
      momentum_(momentum) {
  FREIGHT_CHECK(num_features > 0, fmt::format("{}({}): the number of features must be positive",
                                              type_name, num_features));
  FREIGHT_CHECK(eps > 0 && momentum >= 0 && momentum <= 1,
                fmt::format("{}({}): needs eps > 0 and momentum in [0, 1] (got {}, {})", type_name,
                            num_features, eps, momentum));
  weight_ = register_parameter("weight", Tensor::ones({channels_}));
  bias_ = register_parameter("bias", Tensor::zeros({channels_}));
  running_mean_ = register_buffer("running_mean", Tensor::zeros({channels_}));
  running_var_ = register_buffer("running_var", Tensor::ones({channels_}));
  num_batches_ = register_buffer("num_batches_tracked", Tensor::zeros({}, DType::I64));
}

BatchNorm1d::BatchNorm1d(int64_t num_features, double eps, double momentum)
    : BatchNorm("BatchNorm1d", 2, 3, num_features, eps, momentum) {}

BatchNorm2d::BatchNorm2d(int64_t num_features, double eps, double momentum)
    : BatchNorm("BatchNorm2d", 4, 4, num_features, eps, momentum) {}

std::string BatchNorm::describe() const {
  std::string s = fmt::format("{}({}", type_name(), channels_);
  if (eps_ != 1e-5) s += fmt::format(", eps={}", eps_);
  if (momentum_ != 0.1) s += fmt::format(", momentum={}", momentum_);
  return s + ")";
}

void BatchNorm::check_input(const Shape& in) const {
  int64_t r = int64_t(in.size());
  const char* layout = min_rank_ == 4 ? "[N, C, H, W]" : "[N, C] or [N, C, L]";
  FREIGHT_CHECK(r >= min_rank_ && r <= max_rank_ && in[1] == channels_,
                fmt::format("{}: expects an input {} with C = {}, got {}", describe(), layout,
                            channels_, shape_str(in)));
}

Shape BatchNorm::output_shape(const Shape& in) const {
  check_input(in);
  return in;
}

double BatchNorm::flops(const Shape& in) const {
  return 2.0 * double(shape_numel(in));
}

double BatchNorm::bytes(const Shape& in) const {
  // The statistics pass and the normalising pass both read the input; the output is written
  // once; weight, bias and the running statistics are read (and the latter written).
  return 4.0 * (3.0 * double(shape_numel(in)) + 6.0 * double(channels_));
}

Tensor BatchNorm::forward(const Tensor& x) {
  return run(x, false);
}

Tensor BatchNorm::forward_relu(const Tensor& x) {
  return run(x, true);
}

Tensor BatchNorm::run(const Tensor& x, bool relu) {
  check_input(x.shape());
  Tensor y = relu ? batch_norm_relu(x, weight_, bias_, running_mean_, running_var_, is_training(),
                                    momentum_, eps_)
                  : batch_norm(x, weight_, bias_, running_mean_, running_var_, is_training(),
                               momentum_, eps_);
  // Counted by a kernel where the model runs: a training step captured into a CUDA graph counts
  // at every replay.
  if (is_training()) kernels::count_up(num_batches_.device().type, num_batches_, 1);
  return y;
}

}  // namespace freight::nn
