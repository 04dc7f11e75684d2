// CUDA kernels of the softmax family over a contiguous [outer, n, inner] tensor, softmax along
// the middle axis.
//
// Forward, per slice x of n elements: m = max x, s = Σ exp(x − m), then
//   softmax      y = exp(x − m) / s
//   log_softmax  y = (x − m) − log s   (the difference x − m is exact near the maximum)
// Backward, from y and gy:
//   softmax      gx = y ⊙ (gy − Σ gy⊙y)
//   log_softmax  gx = gy − exp(y) · Σ gy
//
// inner == 1 (rows, the usual last-dimension case): one block per row, threads_for_row(n)
// threads (one warp for 10 classes, up to 256 for long rows), a grid-stride loop over rows. The
// threads of a block read the row with stride blockDim (coalesced) and combine their partial
// max and sum with block_reduce; the row is read again for the output (L1/L2 serve the reread).
// inner > 1: one thread per column (o, i) of the inner axis, 256 per block, three passes down
// the column with stride `inner`; adjacent threads read adjacent columns (coalesced).
#include <cmath>

#include "backend/cuda/block_reduce.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_context.h"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/dispatch.h"
#include "ops/kernels/softmax.h"

namespace freight::cuda {
namespace {

template <class T>
__device__ __forceinline__ T lowest() {
  return -T(INFINITY);
}

template <class T>
__global__ void softmax_rows_kernel(const T* x, int64_t rows, int64_t n, bool log, T* y) {
  __shared__ T scratch[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {  // uniform across the block
    const T* xr = x + r * n;
    T* yr = y + r * n;
    T m = lowest<T>();
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) m = MaxOp{}(m, xr[j]);
    m = block_reduce(m, lowest<T>(), MaxOp{}, scratch);
    T s = 0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) s += d_exp(xr[j] - m);
    s = block_reduce(s, T(0), SumOp{}, scratch);
    if (log) {
      T ls = d_log(s);
      for (int64_t j = threadIdx.x; j < n; j += blockDim.x) yr[j] = (xr[j] - m) - ls;
    } else {
      T inv = T(1) / s;
      for (int64_t j = threadIdx.x; j < n; j += blockDim.x) yr[j] = d_exp(xr[j] - m) * inv;
    }
  }
}

template <class T>
__global__ void softmax_cols_kernel(const T* x, int64_t outer, int64_t n, int64_t inner, bool log,
                                    T* y) {
  int64_t total = outer * inner;
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < total;
       k += int64_t(gridDim.x) * blockDim.x) {
    int64_t o = k / inner, i = k % inner;
    const T* xc = x + o * n * inner + i;
    T* yc = y + o * n * inner + i;
    T m = lowest<T>();
    for (int64_t r = 0; r < n; ++r) m = MaxOp{}(m, xc[r * inner]);
    T s = 0;
    for (int64_t r = 0; r < n; ++r) s += d_exp(xc[r * inner] - m);
    if (log) {
      T ls = d_log(s);
      for (int64_t r = 0; r < n; ++r) yc[r * inner] = (xc[r * inner] - m) - ls;
    } else {
      T inv = T(1) / s;
      for (int64_t r = 0; r < n; ++r) yc[r * inner] = d_exp(xc[r * inner] - m) * inv;
    }
  }
}

template <class T>
__global__ void softmax_backward_rows_kernel(const T* y, const T* gy, int64_t rows, int64_t n,
                                             bool log, T* gx) {
  __shared__ T scratch[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {  // uniform across the block
    const T* yr = y + r * n;
    const T* gr = gy + r * n;
    T* xr = gx + r * n;
    T s = 0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) s += log ? gr[j] : gr[j] * yr[j];
    s = block_reduce(s, T(0), SumOp{}, scratch);
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
      xr[j] = log ? gr[j] - d_exp(yr[j]) * s : yr[j] * (gr[j] - s);
  }
}

template <class T>
__global__ void softmax_backward_cols_kernel(const T* y, const T* gy, int64_t outer, int64_t n,
                                             int64_t inner, bool log, T* gx) {
  int64_t total = outer * inner;
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < total;
       k += int64_t(gridDim.x) * blockDim.x) {
    int64_t o = k / inner, i = k % inner;
    int64_t base = o * n * inner + i;
    T s = 0;
    for (int64_t r = 0; r < n; ++r) {
      int64_t e = base + r * inner;
      s += log ? gy[e] : gy[e] * y[e];
    }
    for (int64_t r = 0; r < n; ++r) {
      int64_t e = base + r * inner;
      gx[e] = log ? gy[e] - d_exp(y[e]) * s : y[e] * (gy[e] - s);
    }
  }
}

void softmax_forward_cuda(const Tensor& x, int64_t outer, int64_t n, int64_t inner, bool log,
                          Tensor& y) {
  const char* name = log ? "log_softmax_forward" : "softmax_forward";
  FREIGHT_CHECK(x.is_contiguous() && y.is_contiguous(),
                std::string(name) + " (cuda): operands must be contiguous");
  if (outer * n * inner == 0) return;
  int dev = y.device().index;
  set_device(dev);
  cudaStream_t s = stream(dev);
  dispatch_floating(x.dtype(), name, [&](auto tag) {
    using T = decltype(tag);
    const T* px = static_cast<const T*>(x.data_ptr());
    T* py = static_cast<T*>(y.data_ptr());
    if (inner == 1)
      softmax_rows_kernel<T>
          <<<blocks_for_rows(outer), threads_for_row(n), 0, s>>>(px, outer, n, log, py);
    else
      softmax_cols_kernel<T>
          <<<blocks_for(outer * inner), 256, 0, s>>>(px, outer, n, inner, log, py);
    FREIGHT_CUDA_CHECK_LAUNCH();
  });
}

void softmax_backward_cuda(const Tensor& y, const Tensor& gy, int64_t outer, int64_t n,
                           int64_t inner, bool log, Tensor& gx) {
  const char* name = log ? "log_softmax_backward" : "softmax_backward";
  FREIGHT_CHECK(y.is_contiguous() && gy.is_contiguous() && gx.is_contiguous(),
                std::string(name) + " (cuda): operands must be contiguous");
  if (outer * n * inner == 0) return;
  int dev = gx.device().index;
  set_device(dev);
  cudaStream_t s = stream(dev);
  dispatch_floating(y.dtype(), name, [&](auto tag) {
    using T = decltype(tag);
    const T* py = static_cast<const T*>(y.data_ptr());
    const T* pg = static_cast<const T*>(gy.data_ptr());
    T* px = static_cast<T*>(gx.data_ptr());
    if (inner == 1)
      softmax_backward_rows_kernel<T>
          <<<blocks_for_rows(outer), threads_for_row(n), 0, s>>>(py, pg, outer, n, log, px);
    else
      softmax_backward_cols_kernel<T>
          <<<blocks_for(outer * inner), 256, 0, s>>>(py, pg, outer, n, inner, log, px);
    FREIGHT_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace

FREIGHT_REGISTER_KERNEL(kernels::softmax_forward, CUDA, softmax_forward_cuda);
FREIGHT_REGISTER_KERNEL(kernels::softmax_backward, CUDA, softmax_backward_cuda);

}  // namespace freight::cuda
