// Shape ops: views of the same storage where the strides allow, packed copies otherwise. Their
// backward rules move the gradient back into the input's shape.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <numeric>

#include "core/autograd_node.h"
#include "core/tensor_impl.h"
#include "freight/error.h"
#include "freight/ops.h"
#include "ops/kernels/elementwise.h"

namespace freight {

namespace {
// Resolves one -1 entry and checks that the element count is kept.
Shape infer_shape(const Shape& requested, int64_t numel, const Shape& from) {
  Shape s = requested;
  int64_t known = 1, unknown = -1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      FREIGHT_CHECK(unknown < 0, fmt::format("reshape: more than one -1 in {}", shape_str(s)));
      unknown = int64_t(i);
    } else {
      FREIGHT_CHECK(s[i] >= 0, fmt::format("reshape: invalid size in {}", shape_str(s)));
      known *= s[i];
    }
  }
  if (unknown >= 0) {
    FREIGHT_CHECK(known > 0 && numel % known == 0,
                  fmt::format("reshape: cannot reshape {} ({} elements) into {}", shape_str(from),
                              numel, shape_str(requested)));
    s[unknown] = numel / known;
  }
  FREIGHT_CHECK(shape_numel(s) == numel,
                fmt::format("reshape: cannot reshape {} ({} elements) into {} ({} elements)",
                            shape_str(from), numel, shape_str(s), shape_numel(s)));
  return s;
}

Tensor packed_copy(const Tensor& x) {
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (x.numel() > 0) kernels::copy(x.device().type, x, out);
  return out;
}
}  // namespace

Tensor Tensor::clone() const {
  Tensor out = packed_copy(*this);
  if (needs_grad({this}))
    record("clone", {*this}, {out}, [](const std::vector<Tensor>& g) { return g; });
  return out;
}

Tensor reshape(const Tensor& x, const Shape& shape) {
  Shape s = infer_shape(shape, x.numel(), x.shape());
  if (s == x.shape()) return x;
  Tensor base = x.is_contiguous() ? x.detach() : packed_copy(x);
  Tensor out = make_view(base, s, contiguous_strides(s), base.offset());
  if (needs_grad({&x})) {
    Shape in_shape = x.shape();
    record("reshape", {x}, {out}, [in_shape](const std::vector<Tensor>& g) {
      return std::vector<Tensor>{reshape(g[0], in_shape)};
    });
  }
  return out;
}

Tensor flatten(const Tensor& x, int64_t start_dim, int64_t end_dim) {
  int64_t r = x.dim();
  if (r == 0) return reshape(x, {1});
  int64_t a = wrap_dim(start_dim, r, "flatten"), b = wrap_dim(end_dim, r, "flatten");
  FREIGHT_CHECK(a <= b,
                fmt::format("flatten: start_dim {} is after end_dim {}", start_dim, end_dim));
  Shape s(x.shape().begin(), x.shape().begin() + a);
  int64_t m = 1;
  for (int64_t i = a; i <= b; ++i) m *= x.shape()[i];
  s.push_back(m);
  s.insert(s.end(), x.shape().begin() + b + 1, x.shape().end());
  return reshape(x, s);
}

Tensor permute(const Tensor& x, const std::vector<int64_t>& dims) {
  int64_t r = x.dim();
  FREIGHT_CHECK(int64_t(dims.size()) == r,
                fmt::format("permute: {} dims given for a tensor of shape {}", dims.size(),
                            shape_str(x.shape())));
  std::vector<int64_t> d(r), inverse(r, -1);
  for (int64_t i = 0; i < r; ++i) {
    d[i] = wrap_dim(dims[i], r, "permute");
    FREIGHT_CHECK(inverse[d[i]] < 0, fmt::format("permute: dimension {} repeated in [{}]", d[i],
                                                 fmt::join(dims, ", ")));
    inverse[d[i]] = i;
  }
  Shape s(r), st(r);
  for (int64_t i = 0; i < r; ++i) {
    s[i] = x.shape()[d[i]];
    st[i] = x.strides()[d[i]];
  }
  Tensor out = make_view(x, s, st, x.offset());
  if (needs_grad({&x})) {
    record("permute", {x}, {out}, [inverse](const std::vector<Tensor>& g) {
      return std::vector<Tensor>{permute(g[0], inverse)};
    });
  }
  return out;
}

Tensor transpose(const Tensor& x, int64_t d0, int64_t d1) {
  int64_t r = x.dim();
  std::vector<int64_t> dims(r);
  std::iota(dims.begin(), dims.end(), 0);
  std::swap(dims[wrap_dim(d0, r, "transpose")], dims[wrap_dim(d1, r, "transpose")]);
  return permute(x, dims);
}

Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end) {
  int64_t d = wrap_dim(dim, x.dim(), "slice");
  int64_t n = x.shape()[d];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape s = x.shape();
  s[d] = end - start;
  Tensor out = make_view(x, s, x.strides(), x.offset() + start * x.strides()[d]);
  if (needs_grad({&x})) {
    Shape in_shape = x.shape();
    record("slice", {x}, {out}, [in_shape, d, start, end](const std::vector<Tensor>& g) {
      Tensor gx = Tensor::zeros(in_shape, g[0].dtype(), g[0].device());
      Tensor window = gx.detach().slice(d, start, end);
      window.copy_(g[0]);
      return std::vector<Tensor>{gx};
    });
  }
  return out;
}

Tensor select(const Tensor& x, int64_t dim, int64_t index) {
  int64_t d = wrap_dim(dim, x.dim(), "select");
  int64_t n = x.shape()[d];
  int64_t i = index < 0 ? index + n : index;
  FREIGHT_CHECK(i >= 0 && i < n, fmt::format("select: index {} out of range for dimension {} of "
                                             "shape {}",
                                             index, d, shape_str(x.shape())));
  Shape s = x.shape(), st = x.strides();
  s.erase(s.begin() + d);
  st.erase(st.begin() + d);
  Tensor out = make_view(x, s, st, x.offset() + i * x.strides()[d]);
  if (needs_grad({&x})) {
    Shape in_shape = x.shape();
    record("select", {x}, {out}, [in_shape, d, i](const std::vector<Tensor>& g) {
      Tensor gx = Tensor::zeros(in_shape, g[0].dtype(), g[0].device());
      Tensor row = gx.detach().select(d, i);
      row.copy_(g[0]);
      return std::vector<Tensor>{gx};
    });
  }
  return out;
}

Tensor Tensor::unsqueeze(int64_t dim) const {
  int64_t d = wrap_dim(dim, this->dim() + 1, "unsqueeze");
  Shape s = shape();
  s.insert(s.begin() + d, 1);
  return freight::reshape(*this, s);
}

Tensor Tensor::squeeze(int64_t dim) const {
  int64_t d = wrap_dim(dim, this->dim(), "squeeze");
  if (shape()[d] != 1) return *this;
  Shape s = shape();
  s.erase(s.begin() + d);
  return freight::reshape(*this, s);
}

Tensor cat(const std::vector<Tensor>& xs, int64_t dim) {
  FREIGHT_CHECK(!xs.empty(), "cat: no tensors given");
  const Tensor& first = xs[0];
  int64_t d = wrap_dim(dim, first.dim(), "cat");
  Shape s = first.shape();
  s[d] = 0;
  for (const Tensor& x : xs) {
    bool same =
        x.dim() == first.dim() && x.dtype() == first.dtype() && x.device() == first.device();
    for (int64_t i = 0; same && i < x.dim(); ++i) same = i == d || x.shape()[i] == first.shape()[i];
    FREIGHT_CHECK(same, fmt::format("cat: tensor of shape {} ({}, {}) does not match {} ({}, {}) "
                                    "outside dimension {}",
                                    shape_str(x.shape()), dtype_name(x.dtype()), x.device().str(),
                                    shape_str(first.shape()), dtype_name(first.dtype()),
                                    first.device().str(), d));
    s[d] += x.shape()[d];
  }
  Tensor out = Tensor::empty(s, first.dtype(), first.device());
  std::vector<int64_t> starts;
  int64_t at = 0;
  for (const Tensor& x : xs) {
    starts.push_back(at);
    Tensor window = out.slice(d, at, at + x.shape()[d]);
    window.copy_(x);
    at += x.shape()[d];
  }
  if (needs_grad(xs)) {
    std::vector<int64_t> sizes;
    for (const Tensor& x : xs) sizes.push_back(x.shape()[d]);
    record("cat", xs, {out}, [d, starts, sizes](const std::vector<Tensor>& g) {
      std::vector<Tensor> gs;
      for (size_t i = 0; i < sizes.size(); ++i)
        gs.push_back(g[0].slice(d, starts[i], starts[i] + sizes[i]).contiguous());
      return gs;
    });
  }
  return out;
}

Tensor stack(const std::vector<Tensor>& xs, int64_t dim) {
  FREIGHT_CHECK(!xs.empty(), "stack: no tensors given");
  int64_t d = wrap_dim(dim, xs[0].dim() + 1, "stack");
  std::vector<Tensor> parts;
  for (const Tensor& x : xs) {
    FREIGHT_CHECK(x.shape() == xs[0].shape(),
                  fmt::format("stack: shapes {} and {} differ", shape_str(x.shape()),
                              shape_str(xs[0].shape())));
    parts.push_back(x.unsqueeze(d));
  }
  return cat(parts, d);
}

// ---------------------------------------------------------------- Tensor's differentiable views
// Declared in freight/tensor.h (the core) and defined here, beside clone(): they are shape ops,
// recorded on the graph.
Tensor Tensor::contiguous() const {
  return is_contiguous() ? *this : clone();
}
Tensor Tensor::reshape(const Shape& s) const {
  return freight::reshape(*this, s);
}
Tensor Tensor::view(const Shape& s) const {
  FREIGHT_CHECK(is_contiguous(), fmt::format("view: tensor of shape {} is not contiguous; use "
                                             "reshape()",
                                             shape_str(shape())));
  return freight::reshape(*this, s);
}
Tensor Tensor::flatten(int64_t a, int64_t b) const {
  return freight::flatten(*this, a, b);
}
Tensor Tensor::transpose(int64_t a, int64_t b) const {
  return freight::transpose(*this, a, b);
}
Tensor Tensor::permute(const std::vector<int64_t>& d) const {
  return freight::permute(*this, d);
}
Tensor Tensor::slice(int64_t d, int64_t a, int64_t b) const {
  return freight::slice(*this, d, a, b);
}
Tensor Tensor::select(int64_t d, int64_t i) const {
  return freight::select(*this, d, i);
}

}  // namespace freight
