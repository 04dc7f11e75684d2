// CUDA kernels of dropout. The mask is the CPU's, bit for bit: element i draws
//   bits_i = philox::element(seed, offset, i) = lane i % 4 of Philox(seed, offset + i / 4)
// (src/core/philox.h compiles for host and device) and is kept when
//   u_i = (bits_i >> 8) / 2^24 >= p   <=>   (bits_i >> 8) >= ceil(p · 2^24),
// the integer threshold computed on the host exactly as dropout_cpu.cpp does.
//
// Forward: one thread per Philox counter, i.e. per group of four consecutive elements (one
//   draw of four 32-bit words serves all four), 256 threads per block, grid-stride over the
//   ceil(n / 4) counters; the last group may be partial.
// Backward: gx = gy · (mask ? scale : 0), one thread per element, 256 per block, grid-stride.
// Both multiply by the mask's factor, as PyTorch does: a dropped NaN or infinity gives NaN.
// Inside a CUDA graph the offset comes partly from device memory (graph_rng_delta in
// cuda_context.h): the draws are those of an eager call at the generator's offset of the
// replay, not the same mask on every replay.
#include <cmath>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_context.h"
#include "backend/cuda/dispatch.h"
#include "core/philox.h"
#include "ops/kernels/dropout.h"

namespace freight::cuda {
namespace {

template <class T>
__global__ void dropout_forward_kernel(const T* x, int64_t n, uint64_t seed, uint64_t offset,
                                       const uint64_t* offset_delta, uint32_t threshold, T scale,
                                       T* y, uint8_t* mask) {
  if (offset_delta) offset += *offset_delta;  // (modulo 2^64, as the generator's offsets)
  int64_t counters = (n + 3) / 4;
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < counters;
       c += int64_t(gridDim.x) * blockDim.x) {
    philox::U32x4 r = philox::draw(seed, offset + uint64_t(c));
    for (int lane = 0; lane < 4; ++lane) {
      int64_t i = 4 * c + lane;  // element i uses lane i % 4 of counter offset + i / 4
      if (i >= n) break;
      bool keep = (r.v[lane] >> 8) >= threshold;
      y[i] = x[i] * (keep ? scale : T(0));
      if (mask) mask[i] = keep ? 1 : 0;
    }
  }
}

void dropout_forward_cuda(const Tensor& x, double p, uint64_t seed, uint64_t offset, Tensor& y,
                          Tensor& mask) {
  FREIGHT_CHECK(x.is_contiguous() && y.is_contiguous() &&
                    (!mask.defined() || (mask.is_contiguous() && mask.dtype() == DType::U8 &&
                                         mask.numel() == x.numel())),
                "dropout_forward (cuda): operands must be contiguous, the mask uint8");
  int64_t n = x.numel();
  if (n == 0) return;
  // The CPU kernel's decision, on integers: keep when (bits >> 8) >= ceil(p · 2^24).
  uint32_t threshold = uint32_t(std::ceil(p * 16777216.0));
  double scale = p < 1.0 ? 1.0 / (1.0 - p) : 0.0;
  int dev = y.device().index;
  set_device(dev);
  uint8_t* m = mask.defined() ? static_cast<uint8_t*>(mask.data_ptr()) : nullptr;
  const uint64_t* delta = graph_rng_delta(dev);
  dispatch_floating(x.dtype(), "dropout_forward", [&](auto tag) {
    using T = decltype(tag);
    dropout_forward_kernel<T><<<blocks_for((n + 3) / 4), 256, 0, stream(dev)>>>(
        static_cast<const T*>(x.data_ptr()), n, seed, offset, delta, threshold, T(scale),
        static_cast<T*>(y.data_ptr()), m);
    FREIGHT_CUDA_CHECK_LAUNCH();
  });
}

template <class T>
__global__ void dropout_backward_kernel(const T* gy, const uint8_t* mask, T scale, int64_t n,
                                        T* gx) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    gx[i] = gy[i] * (mask[i] ? scale : T(0));
}

void dropout_backward_cuda(const Tensor& grad_y, const Tensor& mask, double scale, Tensor& grad_x) {
  FREIGHT_CHECK(grad_y.is_contiguous() && mask.is_contiguous() && mask.dtype() == DType::U8 &&
                    grad_x.is_contiguous() && mask.numel() == grad_x.numel(),
                "dropout_backward (cuda): operands must be contiguous, the mask uint8");
  int64_t n = grad_x.numel();
  if (n == 0) return;
  int dev = grad_x.device().index;
  set_device(dev);
  dispatch_floating(grad_x.dtype(), "dropout_backward", [&](auto tag) {
    using T = decltype(tag);
    dropout_backward_kernel<T><<<blocks_for(n), 256, 0, stream(dev)>>>(
        static_cast<const T*>(grad_y.data_ptr()), static_cast<const uint8_t*>(mask.data_ptr()),
        T(scale), n, static_cast<T*>(grad_x.data_ptr()));
    FREIGHT_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace

FREIGHT_REGISTER_KERNEL(kernels::dropout_forward, CUDA, dropout_forward_cuda);
FREIGHT_REGISTER_KERNEL(kernels::dropout_backward, CUDA, dropout_backward_cuda);

}  // namespace freight::cuda
