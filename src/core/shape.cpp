#include "freight/shape.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "freight/error.h"

namespace freight {

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

Shape contiguous_strides(const Shape& s) {
  Shape st(s.size());
  int64_t acc = 1;
  for (size_t i = s.size(); i-- > 0;) {
    st[i] = acc;
    acc *= s[i];
  }
  return st;
}

std::string shape_str(const Shape& s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

int64_t wrap_dim(int64_t dim, int64_t rank, const char* what) {
  int64_t d = dim < 0 ? dim + rank : dim;
  FREIGHT_CHECK(d >= 0 && d < rank, fmt::format("{}: dimension {} is out of range for a tensor "
                                                "of rank {}",
                                                what, dim, rank));
  return d;
}

}  // namespace freight
