// Op table entry: all_reduce_sum, with a sum over two ranks that hold the same values (so the sum
// doubles): forward 2x, and a gradient that is twice the output gradient, summed the same way.
#include "ops/op_table.h"
#include "ops/reference.h"

namespace freight::test {
namespace {

void two_equal_ranks(Tensor& t) {
  NoGradGuard no_grad;
  t.copy_(scale(t, 2.0));
}

FREIGHT_OP_CASES({
    [] {
      OpCase c;
      c.name = "all_reduce_sum";
      c.shapes = {{{7}}, {{1, 3, 1, 1}}, {{4, 5}}};
      c.forward = [](const Inputs& in) { return all_reduce_sum(in[0], two_equal_ranks); };
      c.reference = [](const Inputs& in) {
        std::vector<double> v = ref::values(in[0]);
        for (double& x : v) x *= 2;
        return ref::tensor(v, in[0].shape());
      };
      return c;
    }(),
});

}  // namespace
}  // namespace freight::test
