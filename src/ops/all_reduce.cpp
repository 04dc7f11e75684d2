// all_reduce_sum: the sum of a tensor over the processes of a data-parallel job, as an op of the
// graph. Every rank's output is s = Σ_r x_r, so ∂L/∂x_r = Σ_r' ∂L_r'/∂s: the gradient is again
// the sum over the ranks of each rank's output gradient, made by the same function. The ranks
// must therefore run the same graph, so that their backward passes make the same sums in the
// same order. The function that sums comes from the caller (training's data-parallel layer), so
// this layer never talks to MPI.
#include "core/autograd_node.h"
#include "freight/error.h"
#include "freight/ops.h"

namespace freight {

Tensor all_reduce_sum(const Tensor& x, const SumOverRanks& sum_over_ranks) {
  FREIGHT_CHECK(bool(sum_over_ranks), "all_reduce_sum: no function to sum over the ranks");
  FREIGHT_CHECK(x.defined(), "all_reduce_sum: the input is undefined");
  Tensor y = x.detach().clone();
  sum_over_ranks(y);
  if (needs_grad({&x})) {
    record("all_reduce_sum", {x}, {y}, [sum_over_ranks](const std::vector<Tensor>& go) {
      Tensor g = go[0].clone();
      sum_over_ranks(g);
      return std::vector<Tensor>{g};
    });
  }
  return y;
}

}  // namespace freight
