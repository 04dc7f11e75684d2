// Reductions: sum and mean over all or some dimensions, argmax, and sum_to (the adjoint of
// broadcasting). Several reduced dimensions are handled as one when adjacent.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "core/autograd_node.h"
#include "freight/error.h"
#include "freight/ops.h"
#include "ops/kernels/elementwise.h"
#include "ops/kernels/reduce.h"
#include "ops/op_utils.h"

namespace freight {

namespace {
// Sorted, unique, wrapped dims; empty list means all.
std::vector<int64_t> normalise_dims(const std::vector<int64_t>& dims, int64_t rank,
                                    const char* op) {
  std::vector<int64_t> d;
  if (dims.empty()) {
    for (int64_t i = 0; i < rank; ++i) d.push_back(i);
    return d;
  }
  for (int64_t x : dims) d.push_back(wrap_dim(x, rank, op));
  std::sort(d.begin(), d.end());
  FREIGHT_CHECK(std::adjacent_find(d.begin(), d.end()) == d.end(),
                fmt::format("{}: repeated dimension in [{}]", op, fmt::join(dims, ", ")));
  return d;
}

// Sum of packed `x` over sorted `dims`, keeping them as size-1 dimensions. No autograd.
Tensor sum_keepdim_raw(const Tensor& x, const std::vector<int64_t>& dims) {
  Tensor cur = packed(x);
  Shape s = cur.shape();
  size_t i = 0;
  // Walk runs of adjacent dims from the last one (each run is one kernel call).
  std::vector<std::pair<int64_t, int64_t>> runs;  // [first, last]
  while (i < dims.size()) {
    size_t j = i;
    while (j + 1 < dims.size() && dims[j + 1] == dims[j] + 1) ++j;
    runs.push_back({dims[i], dims[j]});
    i = j + 1;
  }
  for (auto it = runs.rbegin(); it != runs.rend(); ++it) {
    auto [a, b] = *it;
    int64_t outer = 1, reduced = 1, inner = 1;
    for (int64_t k = 0; k < a; ++k) outer *= s[k];
    for (int64_t k = a; k <= b; ++k) reduced *= s[k];
    for (int64_t k = b + 1; k < int64_t(s.size()); ++k) inner *= s[k];
    for (int64_t k = a; k <= b; ++k) s[k] = 1;
    Tensor out = Tensor::empty(s, cur.dtype(), cur.device());
    if (out.numel() > 0) {
      if (reduced == 0)
        out.fill_(0.0);
      else
        kernels::sum_axis(cur.device().type, cur, outer, reduced, inner, out);
    }
    cur = out;
  }
  return cur;
}

Shape drop_dims(const Shape& s, const std::vector<int64_t>& dims) {
  Shape r;
  for (int64_t i = 0; i < int64_t(s.size()); ++i)
    if (!std::binary_search(dims.begin(), dims.end(), i)) r.push_back(s[i]);
  return r;
}

// A packed copy of `g` broadcast to `shape`.
Tensor broadcast_copy(const Tensor& g, const Shape& shape) {
  Tensor out = Tensor::empty(shape, g.dtype(), g.device());
  if (out.numel() > 0) kernels::copy(g.device().type, expand_view(g, shape), out);
  return out;
}

Tensor reduce(const Tensor& x, const std::vector<int64_t>& dims_in, bool keepdim, bool average,
              const char* op) {
  check_floating(x, op);
  std::vector<int64_t> dims = normalise_dims(dims_in, x.dim(), op);
  Tensor kept = sum_keepdim_raw(x, dims);
  int64_t count = 1;
  for (int64_t d : dims) count *= x.shape()[d];
  if (average) {
    Tensor scaled = Tensor::empty(kept.shape(), kept.dtype(), kept.device());
    if (scaled.numel() > 0)
      kernels::scalar(kept.device().type, ScalarOp::Mul, kept, 1.0 / double(count), scaled);
    kept = scaled;
  }
  Shape out_shape = keepdim ? kept.shape() : drop_dims(x.shape(), dims);
  Tensor out = kept.detach();
  if (out.shape() != out_shape) out = reshape(out, out_shape);
  if (needs_grad({&x})) {
    Shape in_shape = x.shape(), kept_shape = kept.shape();
    double factor = average ? 1.0 / double(count) : 1.0;
    record(op, {x}, {out}, [in_shape, kept_shape, factor](const std::vector<Tensor>& g) {
      Tensor gk = reshape(g[0], kept_shape);
      Tensor gx = broadcast_copy(gk, in_shape);
      if (factor != 1.0) gx = scale(gx, factor);
      return std::vector<Tensor>{gx};
    });
  }
  return out;
}
}  // namespace

Tensor sum(const Tensor& x) { return reduce(x, {}, false, false, "sum"); }
Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  FREIGHT_CHECK(!dims.empty(), "sum: empty dimension list (use sum(x) for all elements)");
  return reduce(x, dims, keepdim, false, "sum");
}
Tensor mean(const Tensor& x) { return reduce(x, {}, false, true, "mean"); }
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  FREIGHT_CHECK(!dims.empty(), "mean: empty dimension list (use mean(x) for all elements)");
  return reduce(x, dims, keepdim, true, "mean");
}

Tensor sum_to(const Tensor& x, const Shape& shape) {
  if (x.shape() == shape) return x;
  int64_t lead = x.dim() - int64_t(shape.size());
  FREIGHT_CHECK(lead >= 0, fmt::format("sum_to: cannot reduce {} to the larger rank of {}",
                                       shape_str(x.shape()), shape_str(shape)));
  std::vector<int64_t> dims;
  for (int64_t i = 0; i < x.dim(); ++i) {
    if (i < lead) {
      dims.push_back(i);
    } else if (shape[i - lead] == 1 && x.shape()[i] != 1) {
      dims.push_back(i);
    } else {
      FREIGHT_CHECK(shape[i - lead] == x.shape()[i],
                    fmt::format("sum_to: {} does not broadcast to {}", shape_str(shape),
                                shape_str(x.shape())));
    }
  }
  if (dims.empty()) return reshape(x, shape);
  return reshape(reduce(x, dims, true, false, "sum_to"), shape);
}

Tensor argmax(const Tensor& x, int64_t dim) {
  FREIGHT_CHECK(x.defined() && x.dim() > 0, "argmax: needs a tensor of rank >= 1");
  int64_t d = wrap_dim(dim, x.dim(), "argmax");
  FREIGHT_CHECK(x.shape()[d] > 0, fmt::format("argmax: dimension {} of {} is empty", d,
                                              shape_str(x.shape())));
  int64_t outer = 1, inner = 1;
  for (int64_t k = 0; k < d; ++k) outer *= x.shape()[k];
  for (int64_t k = d + 1; k < x.dim(); ++k) inner *= x.shape()[k];
  Shape s = x.shape();
  s.erase(s.begin() + d);
  Tensor out = Tensor::empty(s, DType::I64, x.device());
  if (out.numel() > 0)
    kernels::argmax_axis(x.device().type, packed(x), outer, x.shape()[d], inner, out);
  return out;
}

}  // namespace freight
