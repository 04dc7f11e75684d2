// BatchNorm1d / BatchNorm2d.
#include <fmt/format.h>

#include "freight/autograd.h"
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
  if (is_training() && sum_over_ranks_) return run_synced(x, relu);
  // A batch of one row after a Linear layer leaves one value per channel: nothing to normalise
  // over. Said here, where the layer and a likely cause (--batch-size 1) can be named.
  FREIGHT_CHECK(
      !is_training() || x.numel() > channels_,
      fmt::format("{}: training needs more than one value per channel, got input {} "
                  "(a batch of {} row{}; train with batches of at least 2 samples)",
                  describe(), shape_str(x.shape()), x.size(0), x.size(0) == 1 ? "" : "s"));
  Tensor y = relu ? batch_norm_relu(x, weight_, bias_, running_mean_, running_var_, is_training(),
                                    momentum_, eps_)
                  : batch_norm(x, weight_, bias_, running_mean_, running_var_, is_training(),
                               momentum_, eps_);
  // Counted by a kernel where the model runs: a training step captured into a CUDA graph counts
  // at every replay.
  if (is_training()) kernels::count_up(num_batches_.device().type, num_batches_, 1);
  return y;
}

// Training with the statistics of the whole global batch (--sync-bn), from differentiable ops:
//   M = Σ_r m_r,  μ = Σ_r Σ x / M,  σ² = Σ_r Σ (x − μ)² / M   (two passes, as one process),
//   y = (x − μ)/√(σ² + eps) · γ + β.
// The two sums over the ranks are all_reduce_sum ops, so backward sums the gradients of μ and σ²
// over the ranks too: each rank's input gradient then includes the other ranks' terms, the
// gradient of one process over the global batch. γ and β get this rank's share only (the
// data-parallel reducer sums them with the other parameters). Every rank must run the layer with
// at least one row (training refuses batches that would leave a rank none).
Tensor BatchNorm::run_synced(const Tensor& x, bool relu) {
  const int64_t n = x.size(0), c = channels_;
  const int64_t local = c > 0 ? x.numel() / c : 0;  // values per channel on this rank
  FREIGHT_CHECK(n > 0, fmt::format("{} with synchronised statistics: this rank has no rows "
                                   "(input {}); every rank must have some",
                                   describe(), shape_str(x.shape())));
  Tensor count = Tensor::full({1}, double(local), DType::F64);
  sum_over_ranks_(count);
  const double m = count.item();
  FREIGHT_CHECK(m > 1, fmt::format("{}: training needs more than one value per channel over the "
                                   "ranks, got {}",
                                   describe(), m));
  Shape per_channel(x.dim(), 1);
  per_channel[1] = c;
  std::vector<int64_t> dims{0};
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);

  Tensor mu = scale(all_reduce_sum(sum(x, dims, true), sum_over_ranks_), 1.0 / m);
  Tensor centred = sub(x, mu);
  Tensor var = scale(all_reduce_sum(sum(square(centred), dims, true), sum_over_ranks_), 1.0 / m);
  Tensor invstd =
      div(Tensor::ones(per_channel, x.dtype(), x.device()), sqrt(add_scalar(var, eps_)));
  Tensor y = add(mul(mul(centred, invstd), weight_.view(per_channel)), bias_.view(per_channel));
  if (relu) y = freight::relu(y);
  {
    // running ← (1 − momentum)·running + momentum·batch, with the unbiased variance σ²·M/(M − 1).
    NoGradGuard no_grad;
    Tensor mean_c = mu.detach().reshape({c}), var_c = var.detach().reshape({c});
    running_mean_.copy_(add(scale(running_mean_, 1 - momentum_), scale(mean_c, momentum_)));
    running_var_.copy_(
        add(scale(running_var_, 1 - momentum_), scale(var_c, momentum_ * m / (m - 1))));
  }
  kernels::count_up(num_batches_.device().type, num_batches_, 1);
  return y;
}

}  // namespace freight::nn
