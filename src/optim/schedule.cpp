#include "freight/optim/schedule.h"

#include <fmt/format.h>

#include <cmath>

#include "freight/error.h"

namespace freight::optim {

LRScheduler::LRScheduler(Optimizer& opt) : opt_(opt), base_lr_(opt.lr()) {}

void LRScheduler::start() {
  set_last_step(0);
}

void LRScheduler::step() {
  set_last_step(last_step_ + 1);
}

void LRScheduler::set_last_step(int64_t step) {
  FREIGHT_CHECK(step >= 0, fmt::format("LRScheduler: negative step {}", step));
  double lr = lr_at(step);  // may throw (OneCycleLR past its end) before anything changes
  last_step_ = step;
  opt_.set_lr(lr);
}

// ---------------------------------------------------------------- StepLR
StepLR::StepLR(Optimizer& opt, int64_t step_size, double gamma)
    : LRScheduler(opt), step_size_(step_size), gamma_(gamma) {
  FREIGHT_CHECK(step_size > 0,
                fmt::format("StepLR: step_size must be positive, got {}", step_size));
  start();
}

double StepLR::lr_at(int64_t step) const {
  return base_lr_ * std::pow(gamma_, double(step / step_size_));
}

// ---------------------------------------------------------------- CosineAnnealingLR
CosineAnnealingLR::CosineAnnealingLR(Optimizer& opt, int64_t t_max, double eta_min)
    : LRScheduler(opt), t_max_(t_max), eta_min_(eta_min) {
  FREIGHT_CHECK(t_max > 0, fmt::format("CosineAnnealingLR: T_max must be positive, got {}", t_max));
  start();
}

double CosineAnnealingLR::lr_at(int64_t step) const {
  return eta_min_ +
         (base_lr_ - eta_min_) * (1 + std::cos(M_PI * double(step) / double(t_max_))) / 2;
}

// ---------------------------------------------------------------- OneCycleLR
OneCycleLR::OneCycleLR(Optimizer& opt, double max_lr, int64_t total_steps, double pct_start,
                       double div_factor, double final_div_factor)
    : LRScheduler(opt),
      max_lr_(max_lr),
      initial_lr_(max_lr / div_factor),
      min_lr_(max_lr / div_factor / final_div_factor),
      total_steps_(total_steps),
      warmup_end_(pct_start * double(total_steps) - 1) {
  FREIGHT_CHECK(total_steps > 0,
                fmt::format("OneCycleLR: total_steps must be positive, got {}", total_steps));
  FREIGHT_CHECK(pct_start >= 0 && pct_start <= 1,
                fmt::format("OneCycleLR: pct_start must lie in [0, 1], got {}", pct_start));
  FREIGHT_CHECK(max_lr > 0 && div_factor > 0 && final_div_factor > 0,
                fmt::format("OneCycleLR: max_lr, div_factor and final_div_factor must be "
                            "positive (got {}, {}, {})",
                            max_lr, div_factor, final_div_factor));
  start();
}

double OneCycleLR::lr_at(int64_t step) const {
  FREIGHT_CHECK(step <= total_steps_,
                fmt::format("OneCycleLR: step {} is past total_steps {}; make the schedule for "
                            "the whole run",
                            step, total_steps_));
  // Cosine annealing from `from` to `to` as the phase's progress goes 0 → 1 (a phase of zero
  // length counts as done, where PyTorch would divide by zero).
  auto anneal = [](double from, double to, double done, double length) {
    double pct = length > 0 ? done / length : 1.0;
    return to + (from - to) / 2 * (std::cos(M_PI * pct) + 1);
  };
  double s = double(step);
  if (s <= warmup_end_) return anneal(initial_lr_, max_lr_, s, warmup_end_);
  double end = double(total_steps_ - 1);
  return anneal(max_lr_, min_lr_, s - warmup_end_, end - warmup_end_);
}

}  // namespace freight::optim
