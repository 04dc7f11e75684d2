// Elementwise ops: broadcasting binary arithmetic, scalar arithmetic, and the unary functions.
// Their backward rules are written with the same ops (run with recording off).
#include <fmt/format.h>

#include "core/autograd_node.h"
#include "core/tensor_impl.h"
#include "freight/error.h"
#include "freight/ops.h"
#include "ops/kernels/elementwise.h"
#include "ops/op_utils.h"

namespace freight {

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  size_t r = std::max(a.size(), b.size());
  Shape s(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    FREIGHT_CHECK(da == db || da == 1 || db == 1,
                  fmt::format("{}: shapes {} and {} do not broadcast (dimension {}: {} vs {})", op,
                              shape_str(a), shape_str(b), i, da, db));
    s[i] = da == 1 ? db : da;
  }
  return s;
}

Tensor expand_view(const Tensor& x, const Shape& s) {
  if (x.shape() == s) return x.detach();
  size_t r = s.size(), xr = x.shape().size();
  Shape st(r, 0);
  for (size_t i = 0; i < xr; ++i) {
    size_t j = i + (r - xr);
    st[j] = x.shape()[i] == 1 && s[j] != 1 ? 0 : x.strides()[i];
  }
  return make_view(x, s, st, x.offset());
}

void check_same_device_dtype(const Tensor& a, const Tensor& b, const char* op) {
  FREIGHT_CHECK(a.defined() && b.defined(), fmt::format("{}: undefined operand", op));
  FREIGHT_CHECK(a.device() == b.device(),
                fmt::format("{}: operands on different devices ({} {} and {} {}); move one with "
                            ".to(device)",
                            op, shape_str(a.shape()), a.device().str(), shape_str(b.shape()),
                            b.device().str()));
  FREIGHT_CHECK(
      a.dtype() == b.dtype(),
      fmt::format("{}: operands of different dtypes ({} {} and {} {})", op, shape_str(a.shape()),
                  dtype_name(a.dtype()), shape_str(b.shape()), dtype_name(b.dtype())));
}

void check_floating(const Tensor& x, const char* op) {
  FREIGHT_CHECK(x.defined(), fmt::format("{}: undefined input", op));
  FREIGHT_CHECK(is_floating(x.dtype()),
                fmt::format("{}: needs a floating-point tensor, got {} of shape {}", op,
                            dtype_name(x.dtype()), shape_str(x.shape())));
}

namespace {
const char* binary_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::Add:
      return "add";
    case BinaryOp::Sub:
      return "sub";
    case BinaryOp::Mul:
      return "mul";
    case BinaryOp::Div:
      return "div";
    case BinaryOp::AddRelu:
      return "add_relu";
  }
  return "?";
}

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  const char* name = binary_name(op);
  check_same_device_dtype(a, b, name);
  Shape s = a.shape() == b.shape() ? a.shape() : broadcast_shapes(a.shape(), b.shape(), name);
  Tensor out = Tensor::empty(s, a.dtype(), a.device());
  if (out.numel() > 0)
    kernels::binary(a.device().type, op, expand_view(a, s), expand_view(b, s), out);
  if (needs_grad({&a, &b})) {
    bool ga = a.requires_grad(), gb = b.requires_grad();
    // Only a product or a quotient reads its operands back; a sum or a difference keeps their
    // shapes (for sum_to), so that a residual block's branches are not held until backward.
    const bool reads_operands = op == BinaryOp::Mul || op == BinaryOp::Div;
    Tensor sa = reads_operands ? a.detach() : Tensor(), sb = reads_operands ? b.detach() : Tensor();
    const Shape as = a.shape(), bs = b.shape();
    record(name, {a, b}, {out}, [op, sa, sb, as, bs, ga, gb](const std::vector<Tensor>& g) {
      const Tensor& go = g[0];
      Tensor da, db;
      switch (op) {
        case BinaryOp::Add:
          if (ga) da = go;
          if (gb) db = go;
          break;
        case BinaryOp::Sub:
          if (ga) da = go;
          if (gb) db = neg(go);
          break;
        case BinaryOp::Mul:
          if (ga) da = mul(go, sb);
          if (gb) db = mul(go, sa);
          break;
        case BinaryOp::Div:  // d(a/b)/da = 1/b, d(a/b)/db = -a/b²
          if (ga) da = div(go, sb);
          if (gb) db = neg(div(mul(go, sa), mul(sb, sb)));
          break;
        case BinaryOp::AddRelu:  // add_relu records its own backward
          break;
      }
      if (da.defined()) da = sum_to(da, as);
      if (db.defined()) db = sum_to(db, bs);
      return std::vector<Tensor>{da, db};
    });
  }
  return out;
}

Tensor scalar_op(ScalarOp op, const Tensor& a, double s, const char* name) {
  check_floating(a, name);
  Tensor out = Tensor::empty(a.shape(), a.dtype(), a.device());
  if (out.numel() > 0) kernels::scalar(a.device().type, op, packed(a), s, out);
  if (needs_grad({&a})) {
    record(name, {a}, {out}, [op, s](const std::vector<Tensor>& g) {
      return std::vector<Tensor>{op == ScalarOp::Mul ? scale(g[0], s) : g[0]};
    });
  }
  return out;
}

}  // namespace

Tensor unary(UnaryOp op, const Tensor& x) {
  const UnaryOpInfo& info = unary_info(op);
  check_floating(x, info.name);
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (out.numel() > 0) kernels::unary(x.device().type, op, packed(x), out);
  if (needs_grad({&x})) {
    // Only the tensor the descriptor names is kept (nothing for a rule that reads neither x nor
    // y); it goes in both of the kernel's x and y slots, and the rule reads the right one.
    UnarySaves saves = info.saves;
    Tensor kept = saves == UnarySaves::Input    ? x.detach()
                  : saves == UnarySaves::Output ? out.detach()
                                                : Tensor();
    record(info.name, {x}, {out}, [op, kept](const std::vector<Tensor>& g) {
      Tensor gy = packed(g[0]);
      Tensor gx = Tensor::empty(gy.shape(), gy.dtype(), gy.device());
      if (gx.numel() > 0) {
        Tensor k = kept.defined() ? packed(kept) : gy;
        kernels::unary_backward(gy.device().type, op, k, k, gy, gx);
      }
      return std::vector<Tensor>{gx};
    });
  }
  return out;
}

Tensor add(const Tensor& a, const Tensor& b) {
  return binary(BinaryOp::Add, a, b);
}
Tensor sub(const Tensor& a, const Tensor& b) {
  return binary(BinaryOp::Sub, a, b);
}
Tensor mul(const Tensor& a, const Tensor& b) {
  return binary(BinaryOp::Mul, a, b);
}
Tensor div(const Tensor& a, const Tensor& b) {
  return binary(BinaryOp::Div, a, b);
}
// The forward is one binary pass; the backward masks the incoming gradient by the output's sign
// (relu's rule, from the kept output) and hands that one tensor to both inputs, as add does.
Tensor add_relu(const Tensor& a, const Tensor& b) {
  check_same_device_dtype(a, b, "add_relu");
  check_floating(a, "add_relu");
  Shape s = a.shape() == b.shape() ? a.shape() : broadcast_shapes(a.shape(), b.shape(), "add_relu");
  Tensor out = Tensor::empty(s, a.dtype(), a.device());
  if (out.numel() > 0)
    kernels::binary(a.device().type, BinaryOp::AddRelu, expand_view(a, s), expand_view(b, s), out);
  if (needs_grad({&a, &b})) {
    const bool ga = a.requires_grad(), gb = b.requires_grad();
    const Shape as = a.shape(), bs = b.shape();
    Tensor kept = out.detach();
    record("add_relu", {a, b}, {out}, [kept, ga, gb, as, bs](const std::vector<Tensor>& g) {
      Tensor gy = packed(g[0]);
      Tensor gs = Tensor::empty(gy.shape(), gy.dtype(), gy.device());
      if (gs.numel() > 0) {
        Tensor k = packed(kept);
        kernels::unary_backward(gy.device().type, UnaryOp::Relu, k, k, gy, gs);
      }
      return std::vector<Tensor>{ga ? sum_to(gs, as) : Tensor(), gb ? sum_to(gs, bs) : Tensor()};
    });
  }
  return out;
}

Tensor scale(const Tensor& a, double s) {
  return scalar_op(ScalarOp::Mul, a, s, "scale");
}
Tensor add_scalar(const Tensor& a, double s) {
  return scalar_op(ScalarOp::Add, a, s, "add_scalar");
}
#define FREIGHT_DEFINE_UNARY(E, name, ...) \
  Tensor name(const Tensor& x) {           \
    return unary(UnaryOp::E, x);           \
  }
FREIGHT_UNARY_OPS(FREIGHT_DEFINE_UNARY, FREIGHT_DEFINE_UNARY)
#undef FREIGHT_DEFINE_UNARY

Tensor operator+(const Tensor& a, const Tensor& b) {
  return add(a, b);
}
Tensor operator-(const Tensor& a, const Tensor& b) {
  return sub(a, b);
}
Tensor operator*(const Tensor& a, const Tensor& b) {
  return mul(a, b);
}
Tensor operator/(const Tensor& a, const Tensor& b) {
  return div(a, b);
}
Tensor operator*(const Tensor& a, double s) {
  return scale(a, s);
}
Tensor operator*(double s, const Tensor& a) {
  return scale(a, s);
}
Tensor operator-(const Tensor& a) {
  return neg(a);
}

}  // namespace freight
