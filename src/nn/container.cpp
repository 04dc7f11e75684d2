#include <fmt/format.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <typeinfo>

#include "freight/error.h"
#include "freight/nn/container.h"
#include "freight/nn/layers.h"
#include "freight/ops.h"

namespace freight::nn {

namespace {
// FREIGHT_FUSION=0 in the environment turns fusion off for a whole run (to time the difference).
bool fusion_default() {
  const char* v = std::getenv("FREIGHT_FUSION");
  return !(v && std::string(v) == "0");
}
std::atomic<bool> g_fusion{fusion_default()};
}  // namespace

void set_fusion(bool on) {
  g_fusion = on;
}
bool fusion_enabled() {
  return g_fusion;
}

FusedPair fused_pair(const Module& m, const Module& next, const Module* after) {
  if (!fusion_enabled()) return FusedPair::None;
  const std::type_info &a = typeid(m), &b = typeid(next);
  if ((a == typeid(BatchNorm1d) || a == typeid(BatchNorm2d)) && b == typeid(ReLU))
    return FusedPair::BatchNormRelu;
  if (a == typeid(ReLU) && b == typeid(MaxPool2d)) return FusedPair::ReluMaxPool;
  if (a == typeid(ReLU) && b == typeid(AvgPool2d)) return FusedPair::ReluAvgPool;
  if (a == typeid(MaxPool2d) && b == typeid(ReLU)) return FusedPair::MaxPoolRelu;
  if (a == typeid(Residual) && b == typeid(ReLU)) return FusedPair::ResidualRelu;
  if (a == typeid(Conv2d) && b == typeid(ReLU) &&
      !(after && fused_pair(next, *after, nullptr) != FusedPair::None))
    return FusedPair::ConvRelu;
  return FusedPair::None;
}

// ---------------------------------------------------------------- Sequential
Sequential::Sequential(std::initializer_list<ModulePtr> modules) : Module("Sequential") {
  for (const ModulePtr& m : modules) push_back(m);
}

Sequential& Sequential::push_back(ModulePtr module) {
  register_module(std::to_string(size()), std::move(module));
  return *this;
}

const ModulePtr& Sequential::operator[](size_t i) const {
  FREIGHT_CHECK(i < size(),
                fmt::format("Sequential: index {} out of range ({} modules)", i, size()));
  return named_children()[i].second;
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor y = x;
  const NamedModules& children = named_children();
  for (size_t i = 0; i < children.size(); ++i) {
    Module& m = *children[i].second;
    const Module* after = i + 2 < children.size() ? children[i + 2].second.get() : nullptr;
    const FusedPair fused =
        i + 1 < children.size() ? fused_pair(m, *children[i + 1].second, after) : FusedPair::None;
    if (fused == FusedPair::BatchNormRelu || fused == FusedPair::MaxPoolRelu ||
        fused == FusedPair::ResidualRelu || fused == FusedPair::ConvRelu) {
      LayerScope scope(&m);  // the pair's time is the first layer's
      y = fused == FusedPair::BatchNormRelu  ? static_cast<BatchNorm&>(m).forward_relu(y)
          : fused == FusedPair::MaxPoolRelu  ? static_cast<MaxPool2d&>(m).forward_then_relu(y)
          : fused == FusedPair::ResidualRelu ? static_cast<Residual&>(m).forward_relu(y)
                                             : static_cast<Conv2d&>(m).forward_relu(y);
      ++i;
      continue;
    }
    if (fused == FusedPair::ReluMaxPool || fused == FusedPair::ReluAvgPool) {
      Module& pool = *children[i + 1].second;
      LayerScope scope(&pool);  // the pair's time is the pooling's
      y = fused == FusedPair::ReluMaxPool ? static_cast<MaxPool2d&>(pool).forward_relu(y)
                                          : static_cast<AvgPool2d&>(pool).forward_relu(y);
      ++i;
      continue;
    }
    y = m(y);
  }
  return y;
}

double Sequential::bytes(const Shape& in) const {
  Shape s = in;
  double total = 0;
  for (const auto& [name, m] : named_children()) {
    total += m->bytes(s);
    s = m->output_shape(s);
  }
  return total;
}

Shape Sequential::output_shape(const Shape& in) const {
  Shape s = in;
  for (const auto& [name, m] : named_children()) s = m->output_shape(s);
  return s;
}

double Sequential::flops(const Shape& in) const {
  Shape s = in;
  double total = 0;
  for (const auto& [name, m] : named_children()) {
    total += m->flops(s);
    s = m->output_shape(s);
  }
  return total;
}

// ---------------------------------------------------------------- Residual
Residual::Residual(ModulePtr body, ModulePtr shortcut)
    : Module("Residual"), body_(std::move(body)), shortcut_(std::move(shortcut)) {
  register_module("body", body_);
  if (shortcut_) register_module("shortcut", shortcut_);
}

Shape Residual::output_shape(const Shape& in) const {
  Shape b = body_->output_shape(in);
  Shape s = shortcut_ ? shortcut_->output_shape(in) : in;
  FREIGHT_CHECK(b == s, fmt::format("Residual: for input {} the body gives {} but the shortcut "
                                    "gives {}; they must match to be added",
                                    shape_str(in), shape_str(b), shape_str(s)));
  return b;
}

double Residual::flops(const Shape& in) const {
  double f = body_->flops(in) + (shortcut_ ? shortcut_->flops(in) : 0.0);
  return f + double(shape_numel(output_shape(in)));
}

double Residual::bytes(const Shape& in) const {
  double b = body_->bytes(in) + (shortcut_ ? shortcut_->bytes(in) : 0.0);
  return b + 3.0 * 4.0 * double(shape_numel(output_shape(in)));  // the addition: 2 reads, 1 write
}

Tensor Residual::forward(const Tensor& x) {
  return run(x, false);
}

Tensor Residual::forward_relu(const Tensor& x) {
  return run(x, true);
}

Tensor Residual::run(const Tensor& x, bool relu) {
  Tensor b = (*body_)(x);
  Tensor s = shortcut_ ? (*shortcut_)(x) : x;
  FREIGHT_CHECK(b.shape() == s.shape(),
                fmt::format("Residual: for input {} the body gives {} but the shortcut gives {}; "
                            "they must match to be added",
                            shape_str(x.shape()), shape_str(b.shape()), shape_str(s.shape())));
  return relu ? add_relu(b, s) : add(b, s);
}

}  // namespace freight::nn
