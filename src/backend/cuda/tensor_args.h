// Small by-value descriptions of tensors for kernel arguments. Internal to the CUDA backend.
#pragma once
#include <cstdint>

#include "freight/error.h"
#include "freight/tensor.h"

namespace freight::cuda {

inline constexpr int kMaxRank = 8;

// Shape and strides (elements) of a view, to map a flat output index to an input offset.
struct StridedView {
  int rank = 0;
  int64_t shape[kMaxRank] = {};
  int64_t strides[kMaxRank] = {};
};

inline StridedView strided_view(const Tensor& t) {
  FREIGHT_CHECK(t.dim() <= kMaxRank, "CUDA kernels support tensors of rank <= 8");
  StridedView v;
  v.rank = int(t.dim());
  for (int i = 0; i < v.rank; ++i) {
    v.shape[i] = t.shape()[i];
    v.strides[i] = t.strides()[i];
  }
  return v;
}

#if defined(__CUDACC__)
// Offset (elements) of row-major flat index i within view v.
__device__ __forceinline__ int64_t view_offset(const StridedView& v, int64_t i) {
  int64_t off = 0;
  for (int d = v.rank - 1; d >= 0; --d) {
    int64_t n = v.shape[d];
    off += (i % n) * v.strides[d];
    i /= n;
  }
  return off;
}
#endif

}  // namespace freight::cuda
