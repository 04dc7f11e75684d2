// Module: registration, recursive traversal in PyTorch's order, state_dict loading, mode and
// placement.
#include "freight/nn/module.h"

#include <fmt/format.h>

#include <unordered_map>

#include "core/tensor_data.h"
#include "freight/autograd.h"
#include "freight/error.h"

namespace freight::nn {

Module::Module(std::string type_name) : type_name_(std::move(type_name)) {}

std::string Module::describe() const {
  return children_.empty() ? type_name_ + "()" : type_name_;
}

namespace {
void append_tree(const Module& m, int indent, std::string& out) {
  out += m.describe();
  if (m.named_children().empty()) return;
  out += "(\n";
  for (const auto& [name, child] : m.named_children()) {
    out += std::string(size_t(indent + 2), ' ') + "(" + name + "): ";
    append_tree(*child, indent + 2, out);
    out += "\n";
  }
  out += std::string(size_t(indent), ' ') + ")";
}
}  // namespace

std::string Module::to_string() const {
  std::string s;
  append_tree(*this, 0, s);
  return s;
}

Shape Module::output_shape(const Shape& in) const {
  return in;
}
double Module::flops(const Shape&) const {
  return 0.0;
}
double Module::bytes(const Shape& in) const {
  return 4.0 * double(shape_numel(in) + shape_numel(output_shape(in)) + num_parameters());
}

// ---------------------------------------------------------------- registration
void Module::check_new_name(const std::string& name) const {
  FREIGHT_CHECK(
      !name.empty() && name.find('.') == std::string::npos,
      fmt::format("{}: '{}' is not a valid member name (non-empty, no '.')", type_name_, name));
  auto taken = [&](const auto& list) {
    for (const auto& [n, v] : list)
      if (n == name) return true;
    return false;
  };
  FREIGHT_CHECK(!taken(params_) && !taken(buffers_) && !taken(children_),
                fmt::format("{}: the name '{}' is already registered", type_name_, name));
}

Tensor Module::register_parameter(const std::string& name, Tensor t) {
  check_new_name(name);
  FREIGHT_CHECK(t.defined(), fmt::format("{}: parameter '{}' is undefined", type_name_, name));
  t.set_requires_grad(true);
  params_.emplace_back(name, t);
  return t;
}

Tensor Module::register_buffer(const std::string& name, Tensor t) {
  check_new_name(name);
  FREIGHT_CHECK(t.defined(), fmt::format("{}: buffer '{}' is undefined", type_name_, name));
  buffers_.emplace_back(name, t);
  return t;
}

ModulePtr Module::register_module(const std::string& name, ModulePtr module) {
  check_new_name(name);
  FREIGHT_CHECK(module != nullptr, fmt::format("{}: child module '{}' is null", type_name_, name));
  FREIGHT_CHECK(module.get() != this,
                fmt::format("{}: a module cannot be its own child ('{}')", type_name_, name));
  children_.emplace_back(name, module);
  return module;
}

// ---------------------------------------------------------------- traversal
// PyTorch's order: this module's parameters, then its buffers, then each child's entries in
// registration order under "<child>.".
void Module::collect(const std::string& prefix, bool params, bool buffers,
                     NamedTensors& out) const {
  if (params)
    for (const auto& [n, t] : params_) out.emplace_back(prefix + n, t);
  if (buffers)
    for (const auto& [n, t] : buffers_) out.emplace_back(prefix + n, t);
  for (const auto& [n, child] : children_) child->collect(prefix + n + ".", params, buffers, out);
}

NamedTensors Module::named_parameters() const {
  NamedTensors out;
  collect("", true, false, out);
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_parameters()) out.push_back(t);
  return out;
}

NamedTensors Module::named_buffers() const {
  NamedTensors out;
  collect("", false, true, out);
  return out;
}

NamedModules Module::named_modules() const {
  NamedModules out;
  // The root is returned through a non-owning alias: the caller already holds it.
  out.emplace_back("", ModulePtr(ModulePtr(), const_cast<Module*>(this)));
  for (const auto& [n, child] : children_)
    for (auto& [sub, m] : child->named_modules())
      out.emplace_back(sub.empty() ? n : n + "." + sub, sub.empty() ? child : m);
  return out;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (const auto& [name, t] : named_parameters()) n += t.numel();
  return n;
}

// ---------------------------------------------------------------- state_dict
NamedTensors Module::state_dict() const {
  NamedTensors all;
  collect("", true, true, all);
  for (auto& [n, t] : all) t = t.detach();
  return all;
}

void Module::load_state_dict(const NamedTensors& state) {
  NamedTensors mine;
  collect("", true, true, mine);
  std::unordered_map<std::string, size_t> given;
  std::vector<std::string> problems;
  for (size_t i = 0; i < state.size(); ++i) {
    const auto& [name, t] = state[i];
    if (!given.emplace(name, i).second)
      problems.push_back(fmt::format("key '{}' appears twice in the checkpoint", name));
    else if (!t.defined())
      problems.push_back(fmt::format("key '{}' holds an undefined tensor", name));
  }
  std::unordered_map<std::string, bool> expected;
  for (const auto& [name, t] : mine) {
    expected[name] = true;
    auto it = given.find(name);
    if (it == given.end()) {
      problems.push_back(
          fmt::format("missing key '{}' (the model's shape is {})", name, shape_str(t.shape())));
      continue;
    }
    const Tensor& src = state[it->second].second;
    if (!src.defined()) continue;
    // Floating values convert between precisions (float64 into float32, as PyTorch's copy_),
    // but integers or booleans loaded into a floating tensor, or the reverse, are another
    // quantity, not another precision: a checkpoint holding them is refused.
    const bool kinds_differ = is_floating(src.dtype()) != is_floating(t.dtype());
    if (kinds_differ)
      problems.push_back(
          fmt::format("dtype mismatch for '{}': the checkpoint holds {} of shape "
                      "{}, the model's is {} of shape {}",
                      name, dtype_name(src.dtype()), shape_str(src.shape()), dtype_name(t.dtype()),
                      shape_str(t.shape())));
    else if (src.shape() != t.shape())
      problems.push_back(
          fmt::format("size mismatch for '{}': the checkpoint has shape {}, the "
                      "model has shape {}",
                      name, shape_str(src.shape()), shape_str(t.shape())));
  }
  for (const auto& [name, t] : state)
    if (!expected.count(name))
      problems.push_back(fmt::format("unexpected key '{}' (shape {}) is not in the model", name,
                                     t.defined() ? shape_str(t.shape()) : "undefined"));
  if (!problems.empty()) {
    std::string msg =
        fmt::format("load_state_dict into {}: {} problem(s):", type_name_, problems.size());
    for (const auto& p : problems) msg += "\n  " + p;
    throw Error(msg);
  }
  NoGradGuard no_grad;
  for (auto& [name, t] : mine) {
    Tensor dst = t;
    dst.copy_(state[given.at(name)].second);
  }
  for (auto& [n, m] : named_modules()) m->on_state_loaded();
}

// ---------------------------------------------------------------- mode and placement
void Module::train(bool on) {
  training_ = on;
  for (auto& [n, child] : children_) child->train(on);
}

void Module::convert(Device device, DType dtype, bool change_device) {
  auto move = [&](const Tensor& t) {
    if (change_device) return t.detach().to(device);
    return is_floating(t.dtype()) ? t.detach().to(dtype) : t.detach();
  };
  NamedTensors all;
  collect("", true, true, all);
  for (auto& [name, t] : all) {
    Tensor moved = move(t);
    if (moved.device() != t.device() || moved.dtype() != t.dtype()) set_tensor_data(t, moved);
    Tensor g = t.grad();
    if (g.defined()) t.set_grad(move(g));
  }
}

Module& Module::to(Device device) {
  convert(device, DType::F32, true);
  return *this;
}

Module& Module::to(DType dtype) {
  FREIGHT_CHECK(is_floating(dtype), fmt::format("{}.to({}): modules convert to floating dtypes "
                                                "only",
                                                type_name_, dtype_name(dtype)));
  convert(Device::cpu(), dtype, false);
  return *this;
}

void Module::zero_grad() {
  for (auto& [name, t] : named_parameters()) t.zero_grad();
}

}  // namespace freight::nn
