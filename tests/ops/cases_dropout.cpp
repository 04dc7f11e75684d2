// Op table entries: dropout in training (the mask from a fixed seed, recomputed independently
// with Philox in the reference) and in evaluation (the identity). dropout_carry starts the
// generator a few counters below 2^32, so a block of counters has its low words wrap and carry
// into the high words part of the way through (the SIMD kernels count lanes in 32 bits).
#include "core/philox.h"
#include "ops/op_table.h"
#include "ops/reference.h"

namespace freight::test {
namespace {

constexpr uint64_t kSeed = 1234;

// Element i is kept when its Philox uniform is >= p (the generator starts at `offset`).
Tensor ref_dropout(const Tensor& x, double p, uint64_t offset) {
  std::vector<double> v = ref::values(x);
  for (size_t i = 0; i < v.size(); ++i) {
    double u = philox::to_unit_float(philox::element(kSeed, offset, i));
    v[i] = u >= p ? v[i] / (1 - p) : 0.0;
  }
  return ref::tensor(v, x.shape());
}

OpCase dropout_case(std::string name, double p, bool training, uint64_t offset = 0) {
  OpCase c;
  c.name = std::move(name);
  // [256, 300] is above the elementwise grain (the Philox blocks run on threads).
  c.shapes = {{{5}}, {{3, 7}}, {{2, 3, 4, 5}}, {{256, 300}}};
  // A fresh generator per call: the gradient check calls forward many times and needs the
  // same mask each time.
  c.forward = [p, training, offset](const Inputs& in) {
    Generator gen(kSeed);
    gen.set_state(kSeed, offset);
    return dropout(in[0], p, training, &gen);
  };
  c.reference = [p, training, offset](const Inputs& in) {
    return training ? ref_dropout(in[0], p, offset)
                    : ref::tensor(ref::values(in[0]), in[0].shape());
  };
  c.flops = [](const std::vector<Shape>& s) { return double(shape_numel(s[0])); };
  c.bench_shapes = {{{256, 4096}}};
  return c;
}

FREIGHT_OP_CASES({
    dropout_case("dropout", 0.4, true),
    dropout_case("dropout_p0_9", 0.9, true),
    dropout_case("dropout_carry", 0.5, true, (uint64_t(1) << 32) - 5),
    dropout_case("dropout_eval", 0.5, false),
});

}  // namespace
}  // namespace freight::test
