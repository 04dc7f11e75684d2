// Building blocks for the naive float64 references of the op table: element access by
// multi-index and broadcasting, written for clarity rather than speed.
#pragma once
#include <cmath>
#include <functional>
#include <vector>

#include "freight/freight.h"

namespace freight::test::ref {

// The values of `t` (any dtype/device/layout) as a packed row-major array of doubles.
inline std::vector<double> values(const Tensor& t) { return t.to_double_vector(); }
inline Tensor tensor(const std::vector<double>& v, const Shape& s) {
  return Tensor::from_vector(v, s);
}

// Row-major multi-index <-> flat index.
inline std::vector<int64_t> unravel(int64_t flat, const Shape& s) {
  std::vector<int64_t> idx(s.size());
  for (size_t d = s.size(); d-- > 0;) {
    idx[d] = s[d] ? flat % s[d] : 0;
    flat = s[d] ? flat / s[d] : 0;
  }
  return idx;
}
inline int64_t ravel(const std::vector<int64_t>& idx, const Shape& s) {
  int64_t f = 0;
  for (size_t d = 0; d < s.size(); ++d) f = f * s[d] + idx[d];
  return f;
}
// Flat index into a tensor of shape `s` broadcast to `out` at out-index `idx`.
inline int64_t broadcast_flat(const std::vector<int64_t>& idx, const Shape& out, const Shape& s) {
  size_t lead = out.size() - s.size();
  int64_t f = 0;
  for (size_t d = 0; d < s.size(); ++d) f = f * s[d] + (s[d] == 1 ? 0 : idx[d + lead]);
  return f;
}
inline Shape broadcast(const Shape& a, const Shape& b) {
  size_t r = std::max(a.size(), b.size());
  Shape s(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    s[i] = std::max(da, db);
  }
  return s;
}

// out[i] = f(a[i]) elementwise.
inline Tensor map(const Tensor& a, const std::function<double(double)>& f) {
  std::vector<double> v = values(a);
  for (double& x : v) x = f(x);
  return tensor(v, a.shape());
}
// out[idx] = f(a[idx'], b[idx'']) with broadcasting.
inline Tensor zip(const Tensor& a, const Tensor& b, const std::function<double(double, double)>& f) {
  Shape s = broadcast(a.shape(), b.shape());
  std::vector<double> va = values(a), vb = values(b), out(shape_numel(s));
  for (int64_t i = 0; i < int64_t(out.size()); ++i) {
    auto idx = unravel(i, s);
    out[i] = f(va[broadcast_flat(idx, s, a.shape())], vb[broadcast_flat(idx, s, b.shape())]);
  }
  return tensor(out, s);
}

}  // namespace freight::test::ref
