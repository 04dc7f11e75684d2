// Optimizers with PyTorch's update rules. Each step updates every parameter that has a gradient
// with one kernel call over all of them (a fused multi-tensor kernel on devices that have one);
// parameters without a gradient are skipped and their state is left untouched.
//
// The state (per-parameter step counts and buffers, and the learning rate) is exposed as named
// tensors for checkpoints, in the layout of PyTorch's optimizer.state_dict() flattened:
//   "lr"                       float64 scalar
//   "state.<i>.step"           int64 scalar, updates applied to parameter i
//   "state.<i>.momentum_buffer"            (SGD with momentum)
//   "state.<i>.exp_avg", "state.<i>.exp_avg_sq"   (Adam, AdamW)
// where <i> is the parameter's index in the list given to the constructor. Buffers are created
// on a parameter's first update, so a fresh optimizer has none.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "freight/tensor.h"

namespace freight::optim {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // Applies one update to every parameter that has a gradient.
  virtual void step() = 0;
  // Drops every parameter's gradient (the next backward writes fresh ones).
  void zero_grad();

  double lr() const { return lr_; }
  void set_lr(double lr);
  const std::string& name() const { return name_; }
  const std::vector<Tensor>& params() const { return params_; }

  NamedTensors state() const;
  // Restores a state() (from any device; values are copied onto each parameter's device and
  // dtype). Unknown names, indices out of range and shape mismatches are errors naming the key
  // and both shapes; buffers absent from `state` are reset (created again on the next update).
  void load_state(const NamedTensors& state);

  // ---- step scalars, for CUDA graphs ----
  // A step() captured into a CUDA graph replays its kernel launches with the arguments of the
  // captured call, which would freeze the learning rate and Adam's bias corrections. With step
  // scalars on, step() hands the kernels a small float64 tensor on the parameters' device
  // (ops/kernels/optim.h: {lr, 1 − β1ᵗ, 1 − β2ᵗ}) instead of the values themselves, and
  // prepare_step() fills it for the coming update with stream-ordered fills (no host wait).
  // Per update: prepare_step(), then either step() (eager, or being captured), or a replay of a
  // captured step() followed by note_replayed_step() (which advances the host's step counts; the
  // captured step() counted the execution it recorded). Results are bit-identical to the plain
  // path. Every parameter that steps must be at the same step count, which holds when all of
  // them get a gradient on every update.
  void use_step_scalars();
  bool uses_step_scalars() const { return scalars_.defined(); }
  void prepare_step();
  void note_replayed_step();

 protected:
  // `buffer_names`: the per-parameter state buffers of this optimizer, e.g. {"exp_avg",
  // "exp_avg_sq"}.
  Optimizer(std::string name, std::vector<Tensor> params, double lr,
            std::vector<std::string> buffer_names);

  // The parameters with a gradient, checked (contiguous, same device and dtype as their
  // gradient), with their indices, packed gradients, and each state buffer (created as zeros when
  // missing: fresh[k] = 1 marks that). Nothing is recorded until commit(), called once the
  // update kernel has run, so a step that throws leaves the state as it was.
  struct Batch {
    std::vector<size_t> index;
    std::vector<Tensor> params, grads;
    std::vector<std::vector<Tensor>> buffers;  // [buffer kind][k]
    std::vector<uint8_t> fresh;
    std::vector<int64_t> steps;  // step count of each parameter including this update
  };
  Batch gather(bool with_buffers);
  void commit(const Batch& b);
  // The step scalars for the update of `b` (checked against prepare_step()), or an undefined
  // tensor when they are off: what a subclass's step() puts in its config's `scalars`.
  Tensor scalars_for(const Batch& b);
  // The values of the scalars for an update with step count t: {lr, 1 − β1ᵗ, 1 − β2ᵗ} (the
  // default, for optimizers without bias corrections, is {lr, 1, 1}).
  virtual std::array<double, 3> step_scalar_values(int64_t t) const;

  std::string name_;
  std::vector<Tensor> params_;
  double lr_;
  std::vector<std::string> buffer_names_;
  std::vector<int64_t> steps_;                // per parameter
  std::vector<std::vector<Tensor>> buffers_;  // [buffer kind][parameter], undefined until used

 private:
  Tensor scalars_;                      // float64 [3] on the parameters' device, or undefined
  std::array<Tensor, 3> scalar_slots_;  // one-element views of scalars_, for fill_
  int64_t prepared_t_ = 0;              // step count prepare_step() filled in for (0: none pending)
  std::vector<size_t> last_index_;      // the parameters of the last step() (what a replay updates)
};

// Stochastic gradient descent, torch.optim.SGD:
//   d = g + wd·p
//   with momentum μ: b = d on the first update, else b = μ·b + (1 − dampening)·d;
//                    d = d + μ·b (Nesterov) or d = b
//   p = p − lr·d
class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, double lr, double momentum = 0, double dampening = 0,
      double weight_decay = 0, bool nesterov = false);
  void step() override;

 private:
  double momentum_, dampening_, weight_decay_;
  bool nesterov_;
};

// Adam, torch.optim.Adam (L2 penalty folded into the gradient):
//   t = t + 1;  g = g + wd·p
//   m = β1·m + (1 − β1)·g;  v = β2·v + (1 − β2)·g²
//   p = p − (lr / (1 − β1ᵗ)) · m / (√v / √(1 − β2ᵗ) + ε)
class Adam : public Optimizer {
 public:
  Adam(std::vector<Tensor> params, double lr = 1e-3, std::pair<double, double> betas = {0.9, 0.999},
       double eps = 1e-8, double weight_decay = 0);
  void step() override;

 protected:
  Adam(const char* name, std::vector<Tensor> params, double lr, std::pair<double, double> betas,
       double eps, double weight_decay, bool decoupled);
  std::array<double, 3> step_scalar_values(int64_t t) const override;

 private:
  double beta1_, beta2_, eps_, weight_decay_;
  bool decoupled_;
};

// AdamW, torch.optim.AdamW: decoupled weight decay p = p − lr·wd·p applied before the Adam
// update (which then sees the raw gradient).
class AdamW : public Adam {
 public:
  AdamW(std::vector<Tensor> params, double lr = 1e-3,
        std::pair<double, double> betas = {0.9, 0.999}, double eps = 1e-8,
        double weight_decay = 1e-2);
};

}  // namespace freight::optim
