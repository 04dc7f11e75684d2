// dropout: multiplies each element by 0 with probability p, else by 1/(1 − p) (a NaN or an
// infinity that is dropped gives NaN, as in PyTorch). The
// random numbers come from the generator's Philox stream (one counter per four elements,
// reserved here), so the mask depends only on (seed, offset) and is the same on every device.
#include <fmt/format.h>

#include "core/autograd_node.h"
#include "freight/error.h"
#include "freight/ops.h"
#include "freight/random.h"
#include "ops/kernels/dropout.h"
#include "ops/op_utils.h"

namespace freight {

Tensor dropout(const Tensor& x, double p, bool training, Generator* gen) {
  check_floating(x, "dropout");
  FREIGHT_CHECK(p >= 0.0 && p <= 1.0,
                fmt::format("dropout: probability p = {} is outside [0, 1] (input {})", p,
                            shape_str(x.shape())));
  if (!training || p == 0.0) return x;

  Generator& g = gen ? *gen : default_generator();
  int64_t n = x.numel();
  uint64_t seed = g.seed();
  uint64_t offset = g.reserve((uint64_t(n) + 3) / 4);
  bool grad = needs_grad({&x});
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  Tensor mask = grad ? Tensor::empty(x.shape(), DType::U8, x.device()) : Tensor();
  if (n > 0) kernels::dropout_forward(x.device().type, packed(x), p, seed, offset, y, mask);
  if (grad) {
    double s = p < 1.0 ? 1.0 / (1.0 - p) : 0.0;
    Tensor sm = mask.detach();
    record("dropout", {x}, {y}, [sm, s](const std::vector<Tensor>& gy) {
      Tensor gx = Tensor::empty(sm.shape(), gy[0].dtype(), sm.device());
      if (gx.numel() > 0) kernels::dropout_backward(sm.device().type, packed(gy[0]), sm, s, gx);
      return std::vector<Tensor>{gx};
    });
  }
  return y;
}

}  // namespace freight
