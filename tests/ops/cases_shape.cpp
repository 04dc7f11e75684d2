// Op table entries: reshape, flatten, transpose, permute, slice, select, cat, stack.
#include "ops/op_table.h"
#include "ops/reference.h"

namespace freight::test {
namespace {

// Reference permutation by explicit index arithmetic.
Tensor ref_permute(const Tensor& x, const std::vector<int64_t>& dims) {
  Shape s(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) s[i] = x.shape()[dims[i]];
  std::vector<double> v = ref::values(x), out(v.size());
  for (int64_t i = 0; i < int64_t(out.size()); ++i) {
    auto oi = ref::unravel(i, s);
    std::vector<int64_t> xi(dims.size());
    for (size_t d = 0; d < dims.size(); ++d) xi[dims[d]] = oi[d];
    out[i] = v[ref::ravel(xi, x.shape())];
  }
  return ref::tensor(out, s);
}

OpCase shape_case(std::string name, std::vector<std::vector<Shape>> shapes,
                  std::function<Tensor(const Inputs&)> f, std::function<Tensor(const Inputs&)> r) {
  OpCase c;
  c.name = std::move(name);
  c.shapes = std::move(shapes);
  // Each is followed by a multiplication so the gradient flows through a non-view op as well.
  c.forward = std::move(f);
  c.reference = std::move(r);
  return c;
}

FREIGHT_OP_CASES({
    shape_case(
        "reshape", {{{2, 3, 4}}}, [](const Inputs& in) { return reshape(in[0], {4, -1}); },
        [](const Inputs& in) { return ref::tensor(ref::values(in[0]), {4, 6}); }),
    shape_case(
        "flatten", {{{2, 3, 4, 5}}}, [](const Inputs& in) { return flatten(in[0], 1); },
        [](const Inputs& in) { return ref::tensor(ref::values(in[0]), {2, 60}); }),
    shape_case(
        "transpose", {{{3, 5}}, {{2, 3, 4}}},
        [](const Inputs& in) { return transpose(in[0], 0, -1).contiguous(); },
        [](const Inputs& in) {
          std::vector<int64_t> d(in[0].dim());
          for (int64_t i = 0; i < in[0].dim(); ++i) d[i] = i;
          std::swap(d.front(), d.back());
          return ref_permute(in[0], d);
        }),
    shape_case(
        "permute", {{{2, 3, 4}}},
        [](const Inputs& in) { return permute(in[0], {2, 0, 1}); },
        [](const Inputs& in) { return ref_permute(in[0], {2, 0, 1}); }),
    shape_case(
        "permute_then_reshape", {{{2, 3, 4}}},
        [](const Inputs& in) { return reshape(permute(in[0], {1, 0, 2}), {3, 8}); },
        [](const Inputs& in) { return ref_permute(in[0], {1, 0, 2}).reshape({3, 8}); }),
    shape_case(
        "slice", {{{5, 4}}}, [](const Inputs& in) { return slice(in[0], 0, 1, 4); },
        [](const Inputs& in) {
          std::vector<double> v = ref::values(in[0]);
          return ref::tensor(std::vector<double>(v.begin() + 4, v.begin() + 16), {3, 4});
        }),
    shape_case(
        "select_last_step", {{{2, 5, 3}}}, [](const Inputs& in) { return select(in[0], 1, -1); },
        [](const Inputs& in) {
          std::vector<double> v = ref::values(in[0]), out;
          for (int b = 0; b < 2; ++b)
            for (int j = 0; j < 3; ++j) out.push_back(v[(b * 5 + 4) * 3 + j]);
          return ref::tensor(out, {2, 3});
        }),
    shape_case(
        "cat", {{{2, 3}, {2, 2}}}, [](const Inputs& in) { return cat({in[0], in[1]}, 1); },
        [](const Inputs& in) {
          std::vector<double> a = ref::values(in[0]), b = ref::values(in[1]), out;
          for (int r = 0; r < 2; ++r) {
            for (int j = 0; j < 3; ++j) out.push_back(a[r * 3 + j]);
            for (int j = 0; j < 2; ++j) out.push_back(b[r * 2 + j]);
          }
          return ref::tensor(out, {2, 5});
        }),
    shape_case(
        "stack", {{{2, 3}, {2, 3}}}, [](const Inputs& in) { return stack({in[0], in[1]}, 0); },
        [](const Inputs& in) {
          std::vector<double> a = ref::values(in[0]), b = ref::values(in[1]);
          a.insert(a.end(), b.begin(), b.end());
          return ref::tensor(a, {2, 2, 3});
        }),
});

}  // namespace
}  // namespace freight::test
