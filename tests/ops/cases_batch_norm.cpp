// Op table entries: batch_norm in training (2-D, 3-D and 4-D inputs, with and without affine
// parameters and running statistics) and in evaluation; batch_norm_relu (a ReLU fused after it)
// in both.
#include "ops/op_table.h"
#include "ops/reference.h"

namespace freight::test {
namespace {

constexpr double kEps = 1e-5;

// Naive batch norm: statistics per channel (dimension 1) over all other dimensions; the biased
// variance in training, the given running statistics in evaluation.
Tensor ref_batch_norm(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& rm,
                      const Tensor& rv, bool training) {
  int64_t n = x.size(0), c = x.size(1), s = x.numel() / (n * c);
  std::vector<double> v = ref::values(x), out(v.size());
  std::vector<double> vw = w.defined() ? ref::values(w) : std::vector<double>(c, 1.0);
  std::vector<double> vb = b.defined() ? ref::values(b) : std::vector<double>(c, 0.0);
  for (int64_t ch = 0; ch < c; ++ch) {
    double mean = 0, var = 0;
    if (training) {
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < s; ++j) mean += v[(i * c + ch) * s + j];
      mean /= double(n * s);
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < s; ++j) {
          double d = v[(i * c + ch) * s + j] - mean;
          var += d * d;
        }
      var /= double(n * s);
    } else {
      mean = ref::values(rm)[ch];
      var = ref::values(rv)[ch];
    }
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < s; ++j) {
        int64_t k = (i * c + ch) * s + j;
        out[k] = (v[k] - mean) / std::sqrt(var + kEps) * vw[ch] + vb[ch];
      }
  }
  return ref::tensor(out, x.shape());
}

// relu of a reference result.
Tensor ref_relu(const Tensor& y) {
  std::vector<double> v = ref::values(y);
  for (double& e : v) e = e > 0 ? e : 0.0;
  return ref::tensor(v, y.shape());
}

// The op under test: batch_norm, or batch_norm_relu.
Tensor bn_op(bool relu, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& rm,
             const Tensor& rv, bool training) {
  return relu ? batch_norm_relu(x, w, b, rm, rv, training, 0.1, kEps)
              : batch_norm(x, w, b, rm, rv, training, 0.1, kEps);
}

// Training. Inputs: x, then weight and bias when `affine`. With `running`, fresh running
// statistics are made on each call (their update is checked in the unit tests).
OpCase train_case(std::string name, std::vector<std::vector<Shape>> shapes, bool affine,
                  bool running, std::vector<std::vector<Shape>> bench = {}, bool relu = false) {
  OpCase c;
  c.name = std::move(name);
  c.shapes = std::move(shapes);
  c.forward = [affine, running, relu](const Inputs& in) {
    const Tensor& x = in[0];
    Tensor rm, rv;
    if (running) {
      rm = Tensor::zeros({x.size(1)}, x.dtype(), x.device());
      rv = Tensor::ones({x.size(1)}, x.dtype(), x.device());
    }
    return bn_op(relu, x, affine ? in[1] : Tensor(), affine ? in[2] : Tensor(), rm, rv, true);
  };
  c.reference = [affine, relu](const Inputs& in) {
    Tensor y = ref_batch_norm(in[0], affine ? in[1] : Tensor(), affine ? in[2] : Tensor(), Tensor(),
                              Tensor(), true);
    return relu ? ref_relu(y) : y;
  };
  c.f32_rtol = 1e-4;
  c.f32_atol = 1e-5;
  c.flops = [](const std::vector<Shape>& s) { return 8.0 * double(shape_numel(s[0])); };
  c.bench_shapes = std::move(bench);
  return c;
}

// Evaluation. Inputs: x, weight, bias, running_mean, running_var (positive).
OpCase eval_case(std::string name, std::vector<std::vector<Shape>> shapes, bool relu = false) {
  OpCase c;
  c.name = std::move(name);
  c.shapes = std::move(shapes);
  c.forward = [relu](const Inputs& in) {
    return bn_op(relu, in[0], in[1], in[2], in[3], in[4], false);
  };
  c.reference = [relu](const Inputs& in) {
    Tensor y = ref_batch_norm(in[0], in[1], in[2], in[3], in[4], false);
    return relu ? ref_relu(y) : y;
  };
  c.make_inputs = [](const std::vector<Shape>& shapes, DType dtype, Generator& gen) {
    Inputs in = normal_inputs(shapes, dtype, gen);
    in[4] = Tensor::uniform(shapes[4], 0.5, 2.0, dtype, Device::cpu(), &gen);
    return in;
  };
  c.grad_inputs = {0, 1, 2};
  c.f32_rtol = 1e-4;
  c.f32_atol = 1e-5;
  return c;
}

FREIGHT_OP_CASES({
    train_case("batch_norm_train_2d", {{{6, 5}, {5}, {5}}, {{2, 3}, {3}, {3}}}, true, false,
               {{{256, 512}, {512}, {512}}}),
    train_case("batch_norm_train_3d", {{{3, 4, 5}, {4}, {4}}}, true, true),
    train_case("batch_norm_train_4d", {{{3, 2, 4, 5}, {2}, {2}}, {{2, 3, 3, 3}, {3}, {3}}}, true,
               true, {{{64, 16, 32, 32}, {16}, {16}}}),
    train_case("batch_norm_train_no_affine", {{{4, 3, 2, 3}}, {{5, 4}}}, false, true),
    eval_case("batch_norm_eval_2d", {{{6, 5}, {5}, {5}, {5}, {5}}}),
    eval_case("batch_norm_eval_4d", {{{3, 2, 4, 5}, {2}, {2}, {2}, {2}}}),
    // With a fused ReLU: about half the outputs are clamped, so the masked gradient is checked
    // (random inputs put no output within the finite-difference step of 0 at these sizes).
    train_case("batch_norm_relu_train_2d", {{{6, 5}, {5}, {5}}}, true, false, {}, true),
    train_case("batch_norm_relu_train_4d", {{{3, 2, 4, 5}, {2}, {2}}, {{2, 3, 3, 3}, {3}, {3}}},
               true, true, {{{64, 16, 32, 32}, {16}, {16}}}, true),
    train_case("batch_norm_relu_no_affine", {{{4, 3, 2, 3}}}, false, true, {}, true),
    eval_case("batch_norm_relu_eval_4d", {{{3, 2, 4, 5}, {2}, {2}, {2}, {2}}}, true),
});

}  // namespace
}  // namespace freight::test
