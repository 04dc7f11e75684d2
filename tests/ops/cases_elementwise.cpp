// Op table entries: broadcasting arithmetic (add_relu too), scalar arithmetic, unary functions,
// activations.
#include <cmath>

#include "ops/op_table.h"
#include "ops/reference.h"

namespace freight::test {
namespace {

const std::vector<std::vector<Shape>> kBinaryShapes = {
    {{3, 4}, {3, 4}}, {{2, 3, 4}, {4}}, {{5, 1}, {1, 6}}, {{2, 3, 2, 2}, {1, 3, 1, 1}}, {{7}, {}}};
const std::vector<std::vector<Shape>> kUnaryShapes = {{{5}}, {{3, 7}}, {{2, 3, 4, 5}}};

OpCase binary_case(std::string name, Tensor (*op)(const Tensor&, const Tensor&),
                   std::function<double(double, double)> f) {
  OpCase c;
  c.name = std::move(name);
  c.shapes = kBinaryShapes;
  c.forward = [op](const Inputs& in) { return op(in[0], in[1]); };
  c.reference = [f](const Inputs& in) { return ref::zip(in[0], in[1], f); };
  c.flops = [](const std::vector<Shape>& s) {
    return double(shape_numel(ref::broadcast(s[0], s[1])));
  };
  c.bench_shapes = {{{256, 1024}, {256, 1024}}, {{256, 1024}, {1024}}};
  return c;
}

OpCase unary_case(std::string name, Tensor (*op)(const Tensor&), std::function<double(double)> f,
                  std::function<Inputs(const std::vector<Shape>&, DType, Generator&)> make = {}) {
  OpCase c;
  c.name = std::move(name);
  c.shapes = kUnaryShapes;
  c.forward = [op](const Inputs& in) { return op(in[0]); };
  c.reference = [f](const Inputs& in) { return ref::map(in[0], f); };
  c.make_inputs = std::move(make);
  c.flops = [](const std::vector<Shape>& s) { return double(shape_numel(s[0])); };
  c.bench_shapes = {{{256, 4096}}};
  return c;
}

// Positive inputs in [0.5, 2.5] for log and sqrt.
Inputs positive(const std::vector<Shape>& shapes, DType dtype, Generator& gen) {
  Inputs in;
  for (const Shape& s : shapes)
    in.push_back(Tensor::uniform(s, 0.5, 2.5, dtype, Device::cpu(), &gen));
  return in;
}
// Values at least 0.05 away from 0 (the kink of relu), either sign.
Inputs away_from_zero(const std::vector<Shape>& shapes, DType dtype, Generator& gen) {
  Inputs in;
  for (const Shape& s : shapes) {
    Tensor u = Tensor::uniform(s, 0.05, 2.0, DType::F64, Device::cpu(), &gen);
    Tensor sign = Tensor::randint(s, 0, 2, Device::cpu(), &gen);
    std::vector<double> v = u.to_double_vector();
    std::vector<int64_t> sg = sign.to_int_vector();
    for (size_t i = 0; i < v.size(); ++i) v[i] = sg[i] ? v[i] : -v[i];
    in.push_back(Tensor::from_vector(v, s).to(dtype));
  }
  return in;
}
// Denominators away from 0 for div.
Inputs div_inputs(const std::vector<Shape>& shapes, DType dtype, Generator& gen) {
  Inputs in = normal_inputs({shapes[0]}, dtype, gen);
  in.push_back(away_from_zero({shapes[1]}, dtype, gen)[0]);
  return in;
}

// For add_relu: a at least 0.05 away from 0 and b within 0.02 of it, so a + b keeps 0.03 away
// from relu's kink at 0 (of either sign, about half each).
Inputs add_relu_inputs(const std::vector<Shape>& shapes, DType dtype, Generator& gen) {
  Inputs in = away_from_zero({shapes[0]}, dtype, gen);
  in.push_back(Tensor::uniform(shapes[1], -0.02, 0.02, dtype, Device::cpu(), &gen));
  return in;
}

double gelu_ref(double x) {
  return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
}

OpCase scalar_case(std::string name, Tensor (*op)(const Tensor&, double), double s,
                   std::function<double(double)> f) {
  OpCase c = unary_case(std::move(name), nullptr, std::move(f));
  c.forward = [op, s](const Inputs& in) { return op(in[0], s); };
  return c;
}

FREIGHT_OP_CASES({
    binary_case("add", add, [](double a, double b) { return a + b; }),
    binary_case("sub", sub, [](double a, double b) { return a - b; }),
    binary_case("mul", mul, [](double a, double b) { return a * b; }),
    [] {
      OpCase c = binary_case("div", div, [](double a, double b) { return a / b; });
      c.make_inputs = div_inputs;
      return c;
    }(),
    [] {
      OpCase c = binary_case("add_relu", add_relu,
                             [](double a, double b) { return a + b > 0 ? a + b : 0; });
      c.make_inputs = add_relu_inputs;
      return c;
    }(),
    scalar_case("scale", scale, -2.5, [](double x) { return -2.5 * x; }),
    scalar_case("add_scalar", add_scalar, 0.75, [](double x) { return x + 0.75; }),
    unary_case("neg", neg, [](double x) { return -x; }),
    unary_case("exp", exp, [](double x) { return std::exp(x); }),
    unary_case(
        "log", log, [](double x) { return std::log(x); }, positive),
    unary_case(
        "sqrt", sqrt, [](double x) { return std::sqrt(x); }, positive),
    unary_case("square", square, [](double x) { return x * x; }),
    unary_case(
        "relu", relu, [](double x) { return x < 0 ? 0 : x; }, away_from_zero),
    unary_case("sigmoid", sigmoid, [](double x) { return 1 / (1 + std::exp(-x)); }),
    unary_case("tanh", tanh, [](double x) { return std::tanh(x); }),
    unary_case("gelu", gelu, gelu_ref),
    unary_case("silu", silu, [](double x) { return x / (1 + std::exp(-x)); }),
});

}  // namespace
}  // namespace freight::test
