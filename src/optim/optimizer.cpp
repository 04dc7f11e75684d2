// Optimizer base: parameter bookkeeping, gathering the parameters of a step for the fused
// kernels, and the state as named tensors.
#include "freight/optim/optimizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>

#include "freight/autograd.h"
#include "freight/error.h"
#include "ops/kernels/optim.h"

namespace freight::optim {

Optimizer::Optimizer(std::string name, std::vector<Tensor> params, double lr,
                     std::vector<std::string> buffer_names)
    : name_(std::move(name)),
      params_(std::move(params)),
      lr_(lr),
      buffer_names_(std::move(buffer_names)),
      buffers_(buffer_names_.size(), std::vector<Tensor>(params_.size())) {
  FREIGHT_CHECK(!params_.empty(), fmt::format("{}: the parameter list is empty", name_));
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    FREIGHT_CHECK(p.defined(), fmt::format("{}: parameter {} is undefined", name_, i));
    FREIGHT_CHECK(is_floating(p.dtype()),
                  fmt::format("{}: parameter {} of shape {} is {}, not floating point", name_, i,
                              shape_str(p.shape()), dtype_name(p.dtype())));
    FREIGHT_CHECK(p.is_leaf(), fmt::format("{}: parameter {} of shape {} is the result of an op, "
                                           "not a leaf tensor; optimize the leaves",
                                           name_, i, shape_str(p.shape())));
  }
  FREIGHT_CHECK(
      params_.size() < size_t(1) << 30,
      fmt::format("{}: {} parameters is too many for one optimizer", name_, params_.size()));
  Device device = params_[0].device();
  lr_tensor_ = Tensor::zeros({1}, DType::F64, device);
  step_counts_ = Tensor::zeros({int64_t(params_.size())}, DType::I64, device);
  set_lr(lr);
}

Optimizer::~Optimizer() {
  for (size_t i = 0; i < sinks_.size(); ++i)
    if (sinks_[i]) set_grad_sink(params_[i], nullptr);
}

void Optimizer::set_lr(double lr) {
  FREIGHT_CHECK(std::isfinite(lr) && lr >= 0,
                fmt::format("{}: invalid learning rate {}", name_, lr));
  lr_ = lr;
  lr_tensor_.fill_(lr);  // in stream order: the next update reads it
}

std::vector<int64_t> Optimizer::step_counts() const {
  return step_counts_.to_int_vector();
}

StepCounters Optimizer::counters_for(const Batch& b) {
  Device device = b.params[0].device();
  if (lr_tensor_.device() != device) {  // the model moved since the optimizer was made
    lr_tensor_ = lr_tensor_.to(device);
    step_counts_ = step_counts_.to(device);
  }
  StepCounters c{lr_tensor_, step_counts_, {}};
  c.slot.reserve(b.index.size());
  for (size_t i : b.index) c.slot.push_back(int32_t(i));
  return c;
}

void Optimizer::zero_grad() {
  for (const Tensor& p : params_) p.zero_grad();
  remove_grad_sinks(/*filled_too=*/true);
  if (!fused_backward_) return;
  sinks_.assign(params_.size(), nullptr);
  for (size_t i = 0; i < params_.size(); ++i) {
    sinks_[i] = make_grad_sink(i);
    if (sinks_[i]) set_grad_sink(params_[i], sinks_[i]);
  }
}

void Optimizer::set_fused_backward(bool on) {
  fused_backward_ = on;
  if (!on) remove_grad_sinks();  // an unfilled sink is dropped; a filled one waits for step()
}

int64_t Optimizer::updated_in_backward() const {
  int64_t n = 0;
  for (size_t i = 0; i < sinks_.size(); ++i)
    if (sinks_[i] && sinks_[i]->filled) n += params_[i].numel();
  return n;
}

void Optimizer::remove_grad_sinks(bool filled_too) {
  for (size_t i = 0; i < sinks_.size(); ++i)
    if (sinks_[i] && (filled_too || !sinks_[i]->filled)) {
      set_grad_sink(params_[i], nullptr);
      sinks_[i] = nullptr;
    }
  bool any = false;
  for (const auto& s : sinks_) any = any || s;
  if (!any) sinks_.clear();
}

Optimizer::Batch Optimizer::gather(bool with_buffers, const std::vector<uint8_t>* skip) {
  Batch b;
  b.buffers.resize(with_buffers ? buffer_names_.size() : 0);
  for (size_t i = 0; i < params_.size(); ++i) {
    if (skip && (*skip)[i]) continue;
    const Tensor& p = params_[i];
    Tensor g = p.grad();
    if (!g.defined()) continue;  // not reached by backward: skipped, as PyTorch
    FREIGHT_CHECK(p.is_contiguous(), fmt::format("{}: parameter {} of shape {} is not contiguous",
                                                 name_, i, shape_str(p.shape())));
    FREIGHT_CHECK(
        g.shape() == p.shape() && g.dtype() == p.dtype() && g.device() == p.device(),
        fmt::format("{}: the gradient of parameter {} is {} {} on {}, but the "
                    "parameter is {} {} on {}",
                    name_, i, shape_str(g.shape()), dtype_name(g.dtype()), g.device().str(),
                    shape_str(p.shape()), dtype_name(p.dtype()), p.device().str()));
    if (!b.params.empty())
      FREIGHT_CHECK(p.device() == b.params[0].device(),
                    fmt::format("{}: parameters on different devices ({} and {}); one optimizer "
                                "updates parameters of one device",
                                name_, b.params[0].device().str(), p.device().str()));
    b.index.push_back(i);
    b.params.push_back(p);
    b.grads.push_back(g.is_contiguous() ? g : g.detach().contiguous());
    uint8_t fresh = 0;
    for (size_t kind = 0; kind < b.buffers.size(); ++kind) {
      Tensor buf = buffers_[kind][i];
      if (!buf.defined()) {
        buf = Tensor::zeros(p.shape(), p.dtype(), p.device());
        fresh = 1;
      }
      FREIGHT_CHECK(buf.device() == p.device() && buf.dtype() == p.dtype(),
                    fmt::format("{}: state '{}' of parameter {} is {} on {} but the parameter is "
                                "{} on {} (the model was moved after the optimizer updated it: "
                                "create the optimizer after Module::to, or reload its state)",
                                name_, buffer_names_[kind], i, dtype_name(buf.dtype()),
                                buf.device().str(), dtype_name(p.dtype()), p.device().str()));
      b.buffers[kind].push_back(buf);
    }
    b.fresh.push_back(fresh);
  }
  return b;
}

void Optimizer::commit(const Batch& b) {
  for (size_t k = 0; k < b.index.size(); ++k) {
    for (size_t kind = 0; kind < b.buffers.size(); ++kind)
      buffers_[kind][b.index[k]] = b.buffers[kind][k];
  }
}

// ---------------------------------------------------------------- state
NamedTensors Optimizer::state() const {
  NamedTensors out;
  out.emplace_back("lr", Tensor::scalar(lr_, DType::F64));
  const std::vector<int64_t> steps = step_counts();
  for (size_t i = 0; i < params_.size(); ++i) {
    if (steps[i] > 0)
      out.emplace_back(fmt::format("state.{}.step", i),
                       Tensor::from_vector(std::vector<int64_t>{steps[i]}, {}));
    for (size_t kind = 0; kind < buffer_names_.size(); ++kind)
      if (buffers_[kind][i].defined())
        out.emplace_back(fmt::format("state.{}.{}", i, buffer_names_[kind]),
                         buffers_[kind][i].detach());
  }
  return out;
}

void Optimizer::load_state(const NamedTensors& state) {
  std::vector<std::string> problems;
  double lr = lr_;
  std::vector<int64_t> steps(params_.size(), 0);
  std::vector<std::vector<Tensor>> buffers(buffer_names_.size(),
                                           std::vector<Tensor>(params_.size()));
  for (const auto& [name, t] : state) {
    if (!t.defined()) {
      problems.push_back(fmt::format("key '{}' holds an undefined tensor", name));
      continue;
    }
    if (name == "lr") {
      if (t.numel() != 1)
        problems.push_back(
            fmt::format("key 'lr' has shape {}, expected a scalar []", shape_str(t.shape())));
      else
        lr = t.item();
      continue;
    }
    // "state.<i>.<field>"
    size_t i = 0;
    std::string field;
    bool parsed = false;
    if (name.starts_with("state.")) {
      size_t dot = name.find('.', 6);
      if (dot != std::string::npos) {
        auto [p, ec] = std::from_chars(name.data() + 6, name.data() + dot, i);
        parsed = ec == std::errc() && p == name.data() + dot;
        field = name.substr(dot + 1);
      }
    }
    if (!parsed) {
      problems.push_back(fmt::format("unexpected key '{}' (shape {})", name, shape_str(t.shape())));
      continue;
    }
    if (i >= params_.size()) {
      problems.push_back(
          fmt::format("key '{}' names parameter {}, but the optimizer has {} "
                      "parameters",
                      name, i, params_.size()));
      continue;
    }
    if (field == "step") {
      if (t.numel() != 1)
        problems.push_back(
            fmt::format("key '{}' has shape {}, expected a scalar []", name, shape_str(t.shape())));
      else
        steps[i] = int64_t(std::llround(t.item()));
      continue;
    }
    size_t kind = 0;
    while (kind < buffer_names_.size() && buffer_names_[kind] != field) ++kind;
    if (kind == buffer_names_.size()) {
      problems.push_back(fmt::format("unexpected key '{}' (shape {}): {} keeps no '{}'", name,
                                     shape_str(t.shape()), name_, field));
      continue;
    }
    const Tensor& p = params_[i];
    if (t.shape() != p.shape()) {
      problems.push_back(
          fmt::format("size mismatch for '{}': the state has shape {}, parameter "
                      "{} has shape {}",
                      name, shape_str(t.shape()), i, shape_str(p.shape())));
      continue;
    }
    Tensor copy = Tensor::empty(p.shape(), p.dtype(), p.device());
    copy.copy_(t);
    buffers[kind][i] = copy;
  }
  if (!problems.empty()) {
    std::string msg = fmt::format("{}.load_state: {} problem(s):", name_, problems.size());
    for (const auto& p : problems) msg += "\n  " + p;
    throw Error(msg);
  }
  set_lr(lr);
  step_counts_.copy_(Tensor::from_vector(steps, {int64_t(steps.size())}));
  buffers_ = std::move(buffers);
  remove_grad_sinks(/*filled_too=*/true);  // they hold the replaced buffers
}

}  // namespace freight::optim
