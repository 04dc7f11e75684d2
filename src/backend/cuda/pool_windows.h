// Window arithmetic of 2-D pooling along one axis, for the CUDA pooling kernels. Plain C++ (host
// and device), so tests/cuda/cuda_host_logic_test.cpp checks it against brute force without a
// GPU.
//
// Along an axis of length `len`, output window i spans the input positions
//   i·stride − pad + [0, kernel)
// and the parts outside [0, len) are padding.
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#define FREIGHT_POOL_HD __host__ __device__ __forceinline__
#else
#define FREIGHT_POOL_HD inline
#endif

namespace freight::cuda {

// A range of indices [lo, hi) (empty when lo >= hi).
struct IndexRange {
  int64_t lo, hi;
};

// The input positions of window i clipped to the axis: [max(start, 0), min(start + kernel, len)).
FREIGHT_POOL_HD IndexRange window_extent(int64_t i, int64_t stride, int64_t pad, int64_t kernel,
                                         int64_t len) {
  int64_t start = i * stride - pad;
  int64_t lo = start < 0 ? 0 : start;
  int64_t hi = start + kernel < len ? start + kernel : len;
  return {lo, hi};
}

// The windows i in [0, out) whose span contains input position pos (0 <= pos < len):
//   i·stride − pad <= pos            <=>  i <= (pos + pad) / stride            (floor; pos + pad >=
//   0) pos < i·stride − pad + kernel    <=>  i·stride > q with q = pos + pad − kernel
//                                    <=>  i >= 0 when q < 0, else i >= q / stride + 1.
FREIGHT_POOL_HD IndexRange windows_covering(int64_t pos, int64_t stride, int64_t pad,
                                            int64_t kernel, int64_t out) {
  int64_t q = pos + pad - kernel;
  int64_t lo = q < 0 ? 0 : q / stride + 1;
  int64_t last = (pos + pad) / stride;
  int64_t hi = last + 1 < out ? last + 1 : out;
  return {lo, hi};
}

}  // namespace freight::cuda
