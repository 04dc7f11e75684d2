// Learning-rate schedules with PyTorch's closed forms. A schedule is bound to an optimizer:
// construction sets the learning rate of step 0, and each step() advances one step (an epoch or
// a batch, as the caller decides) and sets the optimizer's lr.
#pragma once
#include <cstdint>

#include "freight/optim/optimizer.h"

namespace freight::optim {

class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  void step();  // last_step + 1, and the optimizer's lr = lr_at(last_step)
  int64_t last_step() const { return last_step_; }  // PyTorch's last_epoch; 0 after construction
  void set_last_step(int64_t step);  // restoring a checkpoint: jumps there and sets the lr
  double last_lr() const { return lr_at(last_step_); }
  // The learning rate at step `step` (closed form).
  virtual double lr_at(int64_t step) const = 0;
  Optimizer& optimizer() const { return opt_; }

 protected:
  explicit LRScheduler(Optimizer& opt);
  void start();  // derived constructors end with it: applies step 0
  Optimizer& opt_;
  double base_lr_;  // the optimizer's lr when the schedule was made
  int64_t last_step_ = 0;
};

// lr = base · γ^⌊step / step_size⌋
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& opt, int64_t step_size, double gamma = 0.1);
  double lr_at(int64_t step) const override;

 private:
  int64_t step_size_;
  double gamma_;
};

// lr = η_min + (base − η_min) · (1 + cos(π · step / T_max)) / 2
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& opt, int64_t t_max, double eta_min = 0);
  double lr_at(int64_t step) const override;

 private:
  int64_t t_max_;
  double eta_min_;
};

// The 1cycle policy (Smith & Topin), two phases with cosine annealing, as PyTorch's default:
// warm-up from initial = max_lr / div_factor to max_lr over steps 0 .. pct_start·total − 1, then
// down to min = initial / final_div_factor at step total − 1. Ignores the optimizer's lr.
// Momentum is not cycled (PyTorch's cycle_momentum=False; its default, True, also moves momentum
// or beta1 between 0.85 and 0.95). Stepping past total_steps is an error.
class OneCycleLR : public LRScheduler {
 public:
  OneCycleLR(Optimizer& opt, double max_lr, int64_t total_steps, double pct_start = 0.3,
             double div_factor = 25, double final_div_factor = 1e4);
  double lr_at(int64_t step) const override;

 private:
  double max_lr_, initial_lr_, min_lr_;
  int64_t total_steps_;
  double warmup_end_;  // pct_start · total − 1 (may be fractional, as in PyTorch)
};

}  // namespace freight::optim
