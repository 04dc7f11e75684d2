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
//
// The learning rate and the step counts live on the parameters' device too, where the update
// kernels read and advance them (ops/kernels/optim.h): a step never waits for the host, and the
// same step() captured into a CUDA graph replays with the current learning rate (set_lr writes
// it in stream order) and bias corrections, with nothing for the caller to prepare or patch.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "freight/tensor.h"

namespace freight {
struct GradSink;      // freight/autograd.h
struct StepCounters;  // ops/kernels/optim.h, what the update kernels read and advance
struct SgdConfig;     // ops/kernels/optim.h
}  // namespace freight

namespace freight::optim {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

class Optimizer {
 public:
  virtual ~Optimizer();  // takes its gradient sinks back from the parameters
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // Applies one update to every parameter that has a gradient.
  virtual void step() = 0;
  // Drops every parameter's gradient (the next backward writes fresh ones). With fused backward
  // on, also hands the eligible parameters' state to the next backward (below).
  void zero_grad();

  // Fused backward, off by default. Each zero_grad() then lends the parameters whose update the
  // backend can fuse into their gradient's computation a gradient sink (freight/autograd.h): a
  // linear layer's weight under SGD (any momentum, dampening, weight decay, Nesterov), a float
  // matrix on the CPU. Its backward hands the gradient over as the product dYᵀ·X, and the update
  // runs band of rows by band of rows while each band of the gradient is in cache: the gradient,
  // an array the size of the weight, is never written out and read back. So that parameter is
  // updated during backward, not in step(), and its grad() stays empty; the values are SGD's up to
  // the rounding of the product's bands. The backend declines shapes where that loses (large
  // batches) and a parameter used twice, or whose layer is not a linear one, takes the usual path.
  // One backward per step: a second backward before step() would see updated weights (checked at
  // step()); accumulate gradients with it off. freight train (without data parallelism), bench and
  // explain turn it on unless FREIGHT_FUSION=0.
  void set_fused_backward(bool on);
  bool fused_backward() const { return fused_backward_; }
  // Elements of the parameters that the last backward already updated (their sinks were taken).
  int64_t updated_in_backward() const;

  double lr() const { return lr_; }
  void set_lr(double lr);
  const std::string& name() const { return name_; }
  const std::vector<Tensor>& params() const { return params_; }

  NamedTensors state() const;
  // Restores a state() (from any device; values are copied onto each parameter's device and
  // dtype). Unknown names, indices out of range and shape mismatches are errors naming the key
  // and both shapes; buffers absent from `state` are reset (created again on the next update).
  void load_state(const NamedTensors& state);

  // The updates applied to each parameter so far (a read from the device: for checkpoints and
  // tests, not for every step).
  std::vector<int64_t> step_counts() const;

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
  };
  // `skip`: parameters to leave out (entry i set), e.g. those whose sink took the gradient.
  Batch gather(bool with_buffers, const std::vector<uint8_t>* skip = nullptr);
  void commit(const Batch& b);
  // The learning rate and step counts on the device of `b`'s parameters (moved there with the
  // model if need be), and each parameter's slot: what a subclass's step() hands its kernel.
  StepCounters counters_for(const Batch& b);

  std::string name_;
  std::vector<Tensor> params_;
  double lr_;
  std::vector<std::string> buffer_names_;
  std::vector<std::vector<Tensor>> buffers_;  // [buffer kind][parameter], undefined until used

  // Fused backward: the sink parameter i lends to backward (null: it takes the usual path),
  // called by zero_grad() while fused backward is on.
  virtual std::shared_ptr<GradSink> make_grad_sink(size_t /*i*/) { return nullptr; }
  // The armed sinks, per parameter (null where none); step() reads the filled ones.
  std::vector<std::shared_ptr<GradSink>> sinks_;
  // Removes the sinks from their parameters: the unfilled ones, or all (a filled one's
  // gradient is then lost).
  void remove_grad_sinks(bool filled_too = false);

 private:
  bool fused_backward_ = false;
  Tensor lr_tensor_;    // float64 [1], lr_ on the parameters' device
  Tensor step_counts_;  // int64 [parameters], next to lr_tensor_
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

 protected:
  std::shared_ptr<GradSink> make_grad_sink(size_t i) override;

 private:
  SgdConfig config() const;
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
