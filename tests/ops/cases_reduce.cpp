// Op table entries: sums and means over all or some dimensions, sum_to.
#include "ops/op_table.h"
#include "ops/reference.h"

namespace freight::test {
namespace {

// Reference: sum over `dims` (sorted) of x, keepdim or not, optionally divided by the count.
Tensor ref_reduce(const Tensor& x, std::vector<int64_t> dims, bool keepdim, bool average) {
  const Shape& s = x.shape();
  if (dims.empty())
    for (int64_t d = 0; d < int64_t(s.size()); ++d) dims.push_back(d);
  Shape kept = s;
  int64_t count = 1;
  for (int64_t d : dims) {
    count *= s[d];
    kept[d] = 1;
  }
  std::vector<double> v = ref::values(x), out(shape_numel(kept), 0.0);
  for (int64_t i = 0; i < int64_t(v.size()); ++i) {
    auto idx = ref::unravel(i, s);
    for (int64_t d : dims) idx[d] = 0;
    out[ref::ravel(idx, kept)] += v[i];
  }
  if (average)
    for (double& o : out) o /= double(count);
  Shape final_shape;
  if (keepdim) {
    final_shape = kept;
  } else {
    for (int64_t d = 0; d < int64_t(s.size()); ++d)
      if (std::find(dims.begin(), dims.end(), d) == dims.end()) final_shape.push_back(s[d]);
  }
  return ref::tensor(out, final_shape);
}

OpCase reduce_case(std::string name, std::vector<std::vector<Shape>> shapes,
                   std::vector<int64_t> dims, bool keepdim, bool average) {
  OpCase c;
  c.name = std::move(name);
  c.shapes = std::move(shapes);
  c.forward = [dims, keepdim, average](const Inputs& in) {
    if (dims.empty()) return average ? mean(in[0]) : sum(in[0]);
    return average ? mean(in[0], dims, keepdim) : sum(in[0], dims, keepdim);
  };
  c.reference = [dims, keepdim, average](const Inputs& in) {
    std::vector<int64_t> d;
    for (int64_t x : dims) d.push_back(x < 0 ? x + in[0].dim() : x);
    std::sort(d.begin(), d.end());
    return ref_reduce(in[0], d, keepdim, average);
  };
  c.f32_rtol = 1e-5;
  c.f32_atol = 1e-5;
  c.flops = [](const std::vector<Shape>& s) { return double(shape_numel(s[0])); };
  c.bench_shapes = {{{256, 4096}}};
  return c;
}

FREIGHT_OP_CASES({
    reduce_case("sum_all", {{{7}}, {{3, 5}}, {{2, 3, 4}}}, {}, false, false),
    reduce_case("mean_all", {{{7}}, {{3, 5}}, {{2, 3, 4}}}, {}, false, true),
    reduce_case("sum_dim0", {{{6, 5}}, {{4, 3, 2}}}, {0}, false, false),
    reduce_case("sum_last_keepdim", {{{6, 5}}, {{4, 3, 2}}}, {-1}, true, false),
    reduce_case("sum_dims_0_2", {{{4, 3, 5}}, {{2, 3, 4, 2}}}, {0, 2}, false, false),
    reduce_case("mean_dims_1_2", {{{4, 3, 5}}, {{2, 3, 4, 2}}}, {1, 2}, true, true),
    [] {
      OpCase c;
      c.name = "sum_to";
      c.shapes = {{{4, 3, 5}}};
      c.forward = [](const Inputs& in) { return sum_to(in[0], {3, 1}); };
      c.reference = [](const Inputs& in) {
        return ref_reduce(in[0], {0, 2}, true, false).reshape({3, 1});
      };
      c.f32_atol = 1e-5;
      return c;
    }(),
});

}  // namespace
}  // namespace freight::test
