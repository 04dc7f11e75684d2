// Shapes and strides (in elements, row-major by default).
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace freight {

using Shape = std::vector<int64_t>;

int64_t shape_numel(const Shape& s);
Shape contiguous_strides(const Shape& s);
std::string shape_str(const Shape& s);  // "[64, 784]"
// Wraps a possibly negative dimension index into [0, rank); `what` names the op for the error.
int64_t wrap_dim(int64_t dim, int64_t rank, const char* what);

}  // namespace freight
