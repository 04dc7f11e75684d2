// softmax and log_softmax along any dimension. The operand is packed and viewed as
// [outer, n, inner] around the softmax dimension, so no transposed copies are made; the backward
// rule is a kernel of its own that needs only the saved output.
#include <fmt/format.h>

#include <algorithm>

#include "core/autograd_node.h"
#include "freight/error.h"
#include "freight/ops.h"
#include "ops/kernels/softmax.h"
#include "ops/op_utils.h"

namespace freight {

namespace {
Tensor softmax_impl(const Tensor& x, int64_t dim, bool log) {
  const char* name = log ? "log_softmax" : "softmax";
  check_floating(x, name);
  // A 0-d tensor behaves as one slice of length 1 (as PyTorch, which accepts dim 0 or -1).
  int64_t d = wrap_dim(dim, std::max<int64_t>(x.dim(), 1), name);
  int64_t outer = 1, n = x.dim() == 0 ? 1 : x.shape()[d], inner = 1;
  for (int64_t k = 0; k < d && k < x.dim(); ++k) outer *= x.shape()[k];
  for (int64_t k = d + 1; k < x.dim(); ++k) inner *= x.shape()[k];

  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (y.numel() > 0) kernels::softmax_forward(x.device().type, packed(x), outer, n, inner, log, y);
  if (needs_grad({&x})) {
    Tensor sy = y.detach();
    record(name, {x}, {y}, [sy, outer, n, inner, log](const std::vector<Tensor>& g) {
      Tensor gx = Tensor::empty(sy.shape(), sy.dtype(), sy.device());
      if (gx.numel() > 0)
        kernels::softmax_backward(sy.device().type, sy, packed(g[0]), outer, n, inner, log, gx);
      return std::vector<Tensor>{gx};
    });
  }
  return y;
}
}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) {
  return softmax_impl(x, dim, false);
}
Tensor log_softmax(const Tensor& x, int64_t dim) {
  return softmax_impl(x, dim, true);
}

}  // namespace freight
