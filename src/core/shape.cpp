#include "freight/shape.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "freight/error.h"

namespace freight {

// Shapes reach here from files (checkpoints, model files, datasets) as well as from code, so the
// products are checked: a shape like [2^32, 2^32] must be an error, not a count that wraps to 0
// (signed overflow is undefined behaviour besides). A zero dimension makes the count 0 whatever
// the others are, so it is looked for first.
int64_t shape_numel(const Shape& s) {
  for (int64_t d : s)
    if (d == 0) return 0;
  int64_t n = 1;
  for (int64_t d : s)
    FREIGHT_CHECK(
        !__builtin_mul_overflow(n, d, &n),
        fmt::format("shape {} has more elements than a 64-bit count can hold", shape_str(s)));
  return n;
}

Shape contiguous_strides(const Shape& s) {
  Shape st(s.size());
  int64_t acc = 1;
  for (size_t i = s.size(); i-- > 0;) {
    st[i] = acc;
    FREIGHT_CHECK(
        !__builtin_mul_overflow(acc, s[i], &acc),
        fmt::format("shape {} has strides beyond what a 64-bit offset can hold", shape_str(s)));
  }
  return st;
}

std::string shape_str(const Shape& s) {
  return fmt::format("[{}]", fmt::join(s, ", "));
}

int64_t wrap_dim(int64_t dim, int64_t rank, const char* what) {
  int64_t d = dim < 0 ? dim + rank : dim;
  FREIGHT_CHECK(d >= 0 && d < rank, fmt::format("{}: dimension {} is out of range for a tensor "
                                                "of rank {}",
                                                what, dim, rank));
  return d;
}

}  // namespace freight
