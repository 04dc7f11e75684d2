// Parameter-free layers: activations, Flatten, Reshape, LastStep.
#include <fmt/format.h>

#include "freight/error.h"
#include "freight/nn/layers.h"
#include "freight/ops.h"

namespace freight::nn {

Tensor Activation::forward(const Tensor& x) {
  return unary(op_, x);
}
double Activation::flops(const Shape& in) const {
  return double(shape_numel(in));
}

ModulePtr make_activation(UnaryOp op) {
  switch (op) {
#define FREIGHT_MAKE_ACTIVATION(E, name, Saves, bwd, Layer) \
  case UnaryOp::E:                                          \
    return std::make_shared<Layer>();
    FREIGHT_ACTIVATION_OPS(FREIGHT_MAKE_ACTIVATION)
#undef FREIGHT_MAKE_ACTIVATION
    default:
      return nullptr;
  }
}

// ---------------------------------------------------------------- Flatten
Flatten::Flatten(int64_t start_dim, int64_t end_dim)
    : Module("Flatten"), start_(start_dim), end_(end_dim) {}

std::string Flatten::describe() const {
  return fmt::format("Flatten(start_dim={}, end_dim={})", start_, end_);
}

Shape Flatten::output_shape(const Shape& in) const {
  int64_t r = int64_t(in.size());
  if (r == 0) return {1};
  int64_t a = wrap_dim(start_, r, "Flatten"), b = wrap_dim(end_, r, "Flatten");
  FREIGHT_CHECK(a <= b, fmt::format("{}: start_dim comes after end_dim for input {}", describe(),
                                    shape_str(in)));
  Shape out(in.begin(), in.begin() + a);
  int64_t merged = 1;
  for (int64_t i = a; i <= b; ++i) merged *= in[i];
  out.push_back(merged);
  out.insert(out.end(), in.begin() + b + 1, in.end());
  return out;
}

Tensor Flatten::forward(const Tensor& x) {
  return flatten(x, start_, end_);
}

// ---------------------------------------------------------------- Reshape
Reshape::Reshape(Shape shape) : Module("Reshape"), shape_(std::move(shape)) {
  int unknown = 0;
  for (int64_t d : shape_) {
    FREIGHT_CHECK(d > 0 || d == -1,
                  fmt::format("Reshape: invalid target shape {}", shape_str(shape_)));
    unknown += d == -1;
  }
  FREIGHT_CHECK(unknown <= 1, fmt::format("Reshape: more than one -1 in {}", shape_str(shape_)));
  // output_shape multiplies the known sizes: they must have a product that int64 holds.
  int64_t known = 1;
  for (int64_t d : shape_)
    FREIGHT_CHECK(d == -1 || !__builtin_mul_overflow(known, d, &known),
                  fmt::format("Reshape: target shape {} has more elements than a 64-bit count "
                              "can hold",
                              shape_str(shape_)));
}

std::string Reshape::describe() const {
  return fmt::format("Reshape({})", shape_str(shape_));
}

Shape Reshape::output_shape(const Shape& in) const {
  FREIGHT_CHECK(!in.empty(), fmt::format("{}: needs a batch dimension, got a scalar", describe()));
  int64_t per_sample = in[0] > 0 ? shape_numel(in) / in[0] : 0, known = 1;
  for (int64_t d : shape_)
    if (d > 0) known *= d;
  Shape out{in[0]};
  for (int64_t d : shape_) out.push_back(d == -1 && known > 0 ? per_sample / known : d);
  FREIGHT_CHECK(shape_numel(out) == shape_numel(in),
                fmt::format("{}: cannot reshape {} ({} values per sample)", describe(),
                            shape_str(in), per_sample));
  return out;
}

Tensor Reshape::forward(const Tensor& x) {
  return reshape(x, output_shape(x.shape()));
}

// ---------------------------------------------------------------- LastStep
Shape LastStep::output_shape(const Shape& in) const {
  FREIGHT_CHECK(
      in.size() == 3 && in[1] > 0,
      fmt::format("LastStep: expects a sequence [B, T, H] with T > 0, got {}", shape_str(in)));
  return {in[0], in[2]};
}

Tensor LastStep::forward(const Tensor& x) {
  output_shape(x.shape());  // checks
  return select(x, 1, -1);
}

}  // namespace freight::nn
