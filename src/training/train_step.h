// One training step, the same code on every device: zero_grad, forward, loss, backward,
// optimizer step, and the batch's loss and correct predictions added to a float64 tensor where
// the model runs (kernels::accumulate_metrics). Every counter the step advances lives there too
// and is advanced by a kernel: the optimizer's learning rate and step counts
// (ops/kernels/optim.h), BatchNorm's num_batches_tracked, the random generator's offset (which a
// replay advances as an eager step would). So the step never waits for the host, and a CUDA
// graph (graphed_step.h) can capture it and replay it with nothing to patch on the host
// afterwards: any layer or optimizer built that way works under graphs without a special case.
//
// In a data-parallel job (dist/reducer.h) the step seeds its backward with its rank's share of
// the global batch (`weight`: its rows over the batch's rows) and the Reducer sums the weighted
// gradients over the ranks, in buckets, during backward: each rank then steps with the gradient
// one process would have computed on the whole batch.
#pragma once
#include "dist/reducer.h"
#include "freight/device.h"
#include "freight/nn/model_file.h"
#include "freight/nn/module.h"
#include "freight/optim/optimizer.h"
#include "freight/tensor.h"

namespace freight::detail {

class TrainStep {
 public:
  // `reducer`: the gradient sums of a data-parallel job (null: one process).
  TrainStep(nn::Module& model, const nn::ModelSpec& spec, optim::Optimizer& opt, Device device,
            dist::Reducer* reducer = nullptr);

  // What one step leaves behind besides its updates: the model's output and the loss (detached).
  struct Outputs {
    Tensor output, loss;
  };
  // One step on the batch (x, y), both on the device. `weight` scales the loss's gradient (this
  // rank's share of a global batch; 1 in one process, which then runs exactly as without it).
  //
  // Gradient accumulation (--accumulate K): one optimizer step over K micro-batches. The first
  // micro-batch of a group zeroes the gradients (`first`), each adds its weighted gradient (its
  // rows over the group's rows), and the last (`last`) sums them over the ranks and steps.
  Outputs operator()(const Tensor& x, const Tensor& y, double weight = 1.0, bool first = true,
                     bool last = true);
  // A data-parallel micro-batch on a rank without a row of it (a last batch shorter than the
  // number of ranks): no forward; as the group's last, zeros into the gradient sums (which every
  // rank must join) and the same optimizer step as the other ranks.
  void idle_step(bool first = true, bool last = true);

  // float64 [2] on the device: Σ loss · targets, Σ correct predictions, over the steps since the
  // last reset (or from the given sums, for an epoch resumed in its middle).
  Tensor& sums() { return sums_; }
  void reset_sums(double loss_sum = 0, double correct = 0);
  Device device() const { return device_; }

 private:
  void begin_group(bool last);
  void end_group();

  nn::Module& model_;
  const nn::ModelSpec& spec_;
  optim::Optimizer& opt_;
  Device device_;
  dist::Reducer* reducer_;
  int64_t steps_ = 0;  // (named when a gradient sum times out)
  Tensor sums_;
};

}  // namespace freight::detail
