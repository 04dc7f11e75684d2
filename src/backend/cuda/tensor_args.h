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

// Rewrites `count` views that share one shape into the fewest dimensions that walk them the
// same way: size-1 dimensions are dropped, and dimension d merges into the one before it when,
// in every view, stride[d-1] == stride[d] · shape[d] (then index (i, j) lands at
// (i · shape[d] + j) · stride[d], one dimension of size shape[d-1] · shape[d] and stride
// stride[d]). Broadcast (stride-0) runs merge too. Fewer dimensions means fewer divisions per
// element in view_offset; the element order (row-major over the shape) is unchanged.
inline void coalesce(StridedView* views, int count) {
  int rank = views[0].rank, out = 0;
  for (int d = 0; d < rank; ++d) {
    if (views[0].shape[d] == 1) continue;
    bool merge = out > 0;
    for (int k = 0; merge && k < count; ++k)
      merge = views[k].strides[out - 1] == views[k].strides[d] * views[k].shape[d];
    for (int k = 0; k < count; ++k) {
      StridedView& v = views[k];
      if (merge) {
        v.shape[out - 1] *= v.shape[d];
        v.strides[out - 1] = v.strides[d];
      } else {
        v.shape[out] = v.shape[d];  // out <= d: never overwrites a dimension still to be read
        v.strides[out] = v.strides[d];
      }
    }
    if (!merge) ++out;
  }
  for (int k = 0; k < count; ++k) views[k].rank = out;
}

#if defined(__CUDACC__)
#define FREIGHT_VIEW_HD __host__ __device__ __forceinline__
#else
#define FREIGHT_VIEW_HD inline
#endif

// Offset (elements) of row-major flat index i within view v. Host and device, so the host
// tests check it together with coalesce().
FREIGHT_VIEW_HD int64_t view_offset(const StridedView& v, int64_t i) {
  int64_t off = 0;
  for (int d = v.rank - 1; d >= 0; --d) {
    int64_t n = v.shape[d];
    off += (i % n) * v.strides[d];
    i /= n;
  }
  return off;
}

}  // namespace freight::cuda
