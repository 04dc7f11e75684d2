// Op table entries: softmax and log_softmax along the last, a middle and the first dimension.
#include <cmath>

#include "ops/op_table.h"
#include "ops/reference.h"

namespace freight::test {
namespace {

// Naive: for each element, scan its slice along `dim` for the max and the sum of exponentials.
Tensor ref_softmax(const Tensor& x, int64_t dim, bool log) {
  const Shape& s = x.shape();
  int64_t d = dim < 0 ? dim + int64_t(s.size()) : dim;
  std::vector<double> v = ref::values(x), out(v.size());
  for (int64_t i = 0; i < int64_t(v.size()); ++i) {
    std::vector<int64_t> idx = ref::unravel(i, s);
    double m = -INFINITY;
    for (int64_t k = 0; k < s[d]; ++k) {
      idx[d] = k;
      m = std::max(m, v[ref::ravel(idx, s)]);
    }
    double z = 0;
    for (int64_t k = 0; k < s[d]; ++k) {
      idx[d] = k;
      z += std::exp(v[ref::ravel(idx, s)] - m);
    }
    out[i] = log ? v[i] - m - std::log(z) : std::exp(v[i] - m) / z;
  }
  return ref::tensor(out, s);
}

OpCase softmax_case(std::string name, std::vector<std::vector<Shape>> shapes, int64_t dim,
                    bool log) {
  OpCase c;
  c.name = std::move(name);
  c.shapes = std::move(shapes);
  c.forward = [dim, log](const Inputs& in) {
    return log ? log_softmax(in[0], dim) : softmax(in[0], dim);
  };
  c.reference = [dim, log](const Inputs& in) { return ref_softmax(in[0], dim, log); };
  c.flops = [](const std::vector<Shape>& s) { return 5.0 * double(shape_numel(s[0])); };
  c.bench_shapes = {{{256, 10}}, {{64, 1000}}, {{256, 4096}}};
  return c;
}

// Last-dimension shapes cover the short-row path (several blocks for [700, 5]) and the long-row
// path ([64, 600], above the elementwise grain, so it runs on several threads); [4, 50, 200]
// along dim 1 covers the tiled path on threads.
FREIGHT_OP_CASES({
    softmax_case("softmax", {{{5}}, {{3, 7}}, {{2, 3, 4}}, {{700, 5}}, {{64, 600}}}, -1, false),
    softmax_case("softmax_dim1", {{{2, 3, 4}}, {{3, 5, 1}}, {{4, 50, 200}}}, 1, false),
    softmax_case("softmax_dim0", {{{6, 5}}, {{3, 2, 2}}}, 0, false),
    softmax_case("log_softmax", {{{5}}, {{3, 7}}, {{2, 3, 4}}, {{700, 5}}, {{64, 600}}}, -1, true),
    softmax_case("log_softmax_dim1", {{{2, 3, 4}}, {{3, 5, 1}}, {{4, 50, 200}}}, 1, true),
    softmax_case("log_softmax_dim0", {{{6, 5}}, {{3, 2, 2}}}, 0, true),
});

}  // namespace
}  // namespace freight::test
