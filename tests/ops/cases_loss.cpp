// Op table entries: cross_entropy (int64 labels) and mse_loss.
#include <cmath>

#include "ops/op_table.h"
#include "ops/reference.h"

namespace freight::test {
namespace {

// mean over rows of log Σ_j exp(x_j) − x_label, with the max subtracted for stability.
Tensor ref_cross_entropy(const Tensor& logits, const Tensor& labels) {
  int64_t n = logits.size(0), c = logits.size(1);
  std::vector<double> x = ref::values(logits);
  std::vector<int64_t> l = labels.to_int_vector();
  double total = 0;
  for (int64_t r = 0; r < n; ++r) {
    double m = -INFINITY;
    for (int64_t j = 0; j < c; ++j) m = std::max(m, x[r * c + j]);
    double z = 0;
    for (int64_t j = 0; j < c; ++j) z += std::exp(x[r * c + j] - m);
    total += m + std::log(z) - x[r * c + l[r]];
  }
  return ref::tensor({total / double(n)}, {});
}

Tensor ref_mse(const Tensor& p, const Tensor& t) {
  std::vector<double> a = ref::values(p), b = ref::values(t);
  double total = 0;
  for (size_t i = 0; i < a.size(); ++i) total += (a[i] - b[i]) * (a[i] - b[i]);
  return ref::tensor({total / double(a.size())}, {});
}

// Logits N(0, 2²) (peaked enough that the softmax is not uniform) and labels in [0, C).
Inputs logits_and_labels(const std::vector<Shape>& shapes, DType dtype, Generator& gen) {
  Tensor logits = Tensor::normal(shapes[0], 0, 2, dtype, Device::cpu(), &gen);
  Tensor labels = Tensor::randint(shapes[1], 0, shapes[0][1], Device::cpu(), &gen);
  return {logits, labels};
}

FREIGHT_OP_CASES({
    [] {
      OpCase c;
      c.name = "cross_entropy";
      // Short rows in one and in several blocks ([700, 5]), and long rows; [300, 130] is above
      // the elementwise grain, so the batch sum runs in blocks on threads.
      c.shapes = {
          {{4, 5}, {4}}, {{1, 3}, {1}}, {{64, 10}, {64}}, {{700, 5}, {700}}, {{300, 130}, {300}}};
      c.forward = [](const Inputs& in) { return cross_entropy(in[0], in[1]); };
      c.reference = [](const Inputs& in) { return ref_cross_entropy(in[0], in[1]); };
      c.make_inputs = logits_and_labels;
      c.grad_inputs = {0};
      c.flops = [](const std::vector<Shape>& s) { return 5.0 * double(shape_numel(s[0])); };
      c.bench_shapes = {{{64, 10}, {64}}, {{256, 10}, {256}}, {{256, 1000}, {256}}};
      return c;
    }(),
    [] {
      OpCase c;
      c.name = "mse_loss";
      c.shapes = {
          {{5}, {5}}, {{3, 4}, {3, 4}}, {{2, 3, 4}, {2, 3, 4}}, {{}, {}}, {{200, 200}, {200, 200}}};
      c.forward = [](const Inputs& in) { return mse_loss(in[0], in[1]); };
      c.reference = [](const Inputs& in) { return ref_mse(in[0], in[1]); };
      c.flops = [](const std::vector<Shape>& s) { return 3.0 * double(shape_numel(s[0])); };
      c.bench_shapes = {{{256, 1024}, {256, 1024}}};
      return c;
    }(),
});

}  // namespace
}  // namespace freight::test
