// Matrix products: matmul (2-D, batched 3-D, and [..., k] @ [k, n]) and linear (x·Wᵀ + b).
// Backward rules reuse the GEMM kernel with transpose flags, so no transposed copies are made:
//   C = A·B  =>  dA = dC·Bᵀ,  dB = Aᵀ·dC.
#include <fmt/format.h>

#include "core/autograd_node.h"
#include "core/tensor_impl.h"
#include "freight/error.h"
#include "freight/ops.h"
#include "ops/kernels/blas.h"
#include "ops/kernels/elementwise.h"
#include "ops/op_utils.h"

namespace freight {

namespace {
// c = op(a)·op(b) for packed 2-D or 3-D operands; allocates c.
Tensor gemm_new(const Tensor& a, bool ta, const Tensor& b, bool tb) {
  bool batched = a.dim() == 3;
  int64_t m = ta ? a.size(-1) : a.size(-2);
  int64_t n = tb ? b.size(-2) : b.size(-1);
  Shape s = batched ? Shape{a.size(0), m, n} : Shape{m, n};
  Tensor c = Tensor::empty(s, a.dtype(), a.device());
  if (c.numel() > 0) kernels::gemm(a.device().type, a, ta, b, tb, c, 1.0, 0.0);
  return c;
}

Tensor matmul_2d_or_batched(const Tensor& a_in, const Tensor& b_in) {
  Tensor a = packed(a_in), b = packed(b_in);
  Tensor out = gemm_new(a, false, b, false);
  if (needs_grad({&a_in, &b_in})) {
    bool ga = a_in.requires_grad(), gb = b_in.requires_grad();
    Tensor sa = a.detach(), sb = b.detach();
    record("matmul", {a_in, b_in}, {out}, [sa, sb, ga, gb](const std::vector<Tensor>& g) {
      Tensor go = packed(g[0]);
      Tensor da = ga ? gemm_new(go, false, sb, true) : Tensor();
      Tensor db = gb ? gemm_new(sa, true, go, false) : Tensor();
      return std::vector<Tensor>{da, db};
    });
  }
  return out;
}
}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  check_same_device_dtype(a, b, "matmul");
  check_floating(a, "matmul");
  auto mismatch = [&] {
    return fmt::format("matmul: shapes {} and {} cannot be multiplied", shape_str(a.shape()),
                       shape_str(b.shape()));
  };
  if (a.dim() == 2 && b.dim() == 2) {
    FREIGHT_CHECK(a.size(1) == b.size(0), mismatch());
    return matmul_2d_or_batched(a, b);
  }
  if (a.dim() == 3 && b.dim() == 3) {
    FREIGHT_CHECK(a.size(0) == b.size(0) && a.size(2) == b.size(1), mismatch());
    return matmul_2d_or_batched(a, b);
  }
  if (a.dim() > 2 && b.dim() == 2) {
    FREIGHT_CHECK(a.size(-1) == b.size(0), mismatch());
    Shape s = a.shape();
    s.back() = b.size(1);
    return reshape(matmul_2d_or_batched(reshape(a, {-1, a.size(-1)}), b), s);
  }
  throw Error(mismatch() + " (supported: 2-D @ 2-D, 3-D @ 3-D batched, N-D @ 2-D)");
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  check_same_device_dtype(x, weight, "linear");
  check_floating(x, "linear");
  FREIGHT_CHECK(weight.dim() == 2 && x.dim() >= 1 && x.size(-1) == weight.size(1),
                fmt::format("linear: input {} does not match weight {} (expected input [..., {}])",
                            shape_str(x.shape()), shape_str(weight.shape()),
                            weight.dim() == 2 ? weight.size(1) : -1));
  int64_t in = weight.size(1), out_features = weight.size(0);
  if (bias.defined()) {
    check_same_device_dtype(x, bias, "linear");
    FREIGHT_CHECK(bias.dim() == 1 && bias.size(0) == out_features,
                  fmt::format("linear: bias {} does not match weight {} (expected [{}])",
                              shape_str(bias.shape()), shape_str(weight.shape()), out_features));
  }
  Tensor x2 = packed(x.detach()).view({-1, in});
  Tensor w = packed(weight);
  int64_t m = x2.size(0);
  Tensor y = Tensor::empty({m, out_features}, x.dtype(), x.device());
  if (y.numel() > 0) {
    double beta = 0.0;
    if (bias.defined()) {  // y = broadcast(bias), then y = x·Wᵀ + y
      kernels::copy(x.device().type, expand_view(bias, {m, out_features}), y);
      beta = 1.0;
    }
    kernels::gemm(x.device().type, x2, false, w, true, y, 1.0, beta);
  }
  Shape out_shape = x.shape();
  out_shape.back() = out_features;
  Tensor out = y.view(out_shape);
  if (needs_grad({&x, &weight, &bias})) {
    bool gx = x.requires_grad(), gw = weight.requires_grad();
    bool gb = bias.defined() && bias.requires_grad();
    Tensor sx = x2.detach(), sw = w.detach();
    Shape x_shape = x.shape();
    std::vector<Tensor> inputs{x, weight};
    if (bias.defined()) inputs.push_back(bias);
    size_t n_inputs = inputs.size();
    // A parameter weight may carry a gradient sink (an optimizer's update that takes dW as its
    // factors, freight/autograd.h).
    std::weak_ptr<TensorImpl> weight_leaf;
    if (gw && weight.is_leaf()) weight_leaf = weight.impl_ptr();
    record("linear", inputs, {out},
           [sx, sw, gx, gw, gb, x_shape, out_features, n_inputs,
            weight_leaf](const std::vector<Tensor>& g) {
             Tensor go = packed(g[0]).view({-1, out_features});
             std::vector<Tensor> r(n_inputs);
             if (gx) r[0] = gemm_new(go, false, sw, false).view(x_shape);  // dX = dY·W
             if (gw) {  // dW = dYᵀ·X, or its two factors to the weight's sink
               GradSink* s = sole_grad_sink(weight_leaf);
               if (s && s->take_product(go, sx))
                 s->filled = true;
               else
                 r[1] = gemm_new(go, true, sx, false);
             }
             if (gb) r[2] = sum(go, {0});  // db = Σ_rows dY
             return r;
           });
  }
  return out;
}

}  // namespace freight
