// Op table entry: embedding (int64 indices into a [num, dim] table; gradient for the table).
#include "ops/op_table.h"
#include "ops/reference.h"

namespace freight::test {
namespace {

Tensor ref_embedding(const Tensor& indices, const Tensor& weight) {
  int64_t dim = weight.size(1);
  std::vector<int64_t> idx = indices.to_int_vector();
  std::vector<double> w = ref::values(weight), out;
  for (int64_t i : idx)
    for (int64_t j = 0; j < dim; ++j) out.push_back(w[i * dim + j]);
  Shape s = indices.shape();
  s.push_back(dim);
  return ref::tensor(out, s);
}

// shapes[0]: the indices (uniform in [0, num), so repeats occur), shapes[1]: the table.
Inputs indices_and_table(const std::vector<Shape>& shapes, DType dtype, Generator& gen) {
  Tensor idx = Tensor::randint(shapes[0], 0, shapes[1][0], Device::cpu(), &gen);
  Tensor w = Tensor::normal(shapes[1], 0, 1, dtype, Device::cpu(), &gen);
  return {idx, w};
}

FREIGHT_OP_CASES({
    [] {
      OpCase c;
      c.name = "embedding";
      // [2, 6] into 4 rows forces repeated indices (the backward must accumulate them);
      // [400] x 96 is above the elementwise grain (threads split the table rows).
      c.shapes = {{{5}, {7, 3}}, {{2, 6}, {4, 5}}, {{}, {3, 4}}, {{400}, {50, 96}}};
      c.forward = [](const Inputs& in) { return embedding(in[0], in[1]); };
      c.reference = [](const Inputs& in) { return ref_embedding(in[0], in[1]); };
      c.make_inputs = indices_and_table;
      c.grad_inputs = {1};
      c.flops = [](const std::vector<Shape>& s) { return double(shape_numel(s[0]) * s[1][1]); };
      c.bench_shapes = {{{64, 35}, {10000, 128}}};
      return c;
    }(),
});

}  // namespace
}  // namespace freight::test
