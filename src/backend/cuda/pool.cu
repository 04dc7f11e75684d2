// CUDA kernels of 2-D pooling over `planes` independent [h, w] planes (N·C of them), with the
// CPU's conventions (pool_cpu.cpp) kept exactly:
//  * max: padding is −∞, the window is scanned in row-major order and a value replaces the best
//    one when it is larger or NaN, so the first maximum wins and a NaN propagates; the saved
//    index (int32) is r·w + c within the input plane. A window whose values are all −∞ keeps
//    the first position inside the plane.
//  * average: the sum over the part of the window inside the plane, times 1/(kh·kw) (padding
//    counts in the divisor: count_include_pad).
//
// Forward: one thread per output element (plane, i, j), 256 per block, grid-stride; adjacent
//   threads take adjacent output columns.
// Backward: one thread per input element (plane, r, c), 256 per block, grid-stride. Each thread
//   gathers from the windows that cover its element (pool_windows.h), visiting them in row-major
//   output order, which is the order in which the CPU kernel adds them: no atomics, one writer
//   per element, the same sums as the CPU. Every element is written (0 when nothing reaches it).
#include <cmath>
#include <initializer_list>
#include <string>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_context.h"
#include "backend/cuda/dispatch.h"
#include "backend/cuda/pool_windows.h"
#include "backend/cuda/unary_rules.cuh"
#include "ops/kernels/pool.h"

namespace freight::cuda {
namespace {

// relu Input: the window is read through relu (a NaN passes and wins); Output: the maximum (a
// NaN wins) is written through relu. Either way a window whose output is <= 0 gets index −1
// (kernels::max_pool2d_forward).
template <class T>
__global__ void max_pool_forward_kernel(const T* x, Pool2dGeometry g, PoolRelu relu, T* y,
                                        int32_t* idx) {
  const int64_t total = g.planes * g.oh * g.ow;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t j = e % g.ow, i = (e / g.ow) % g.oh, p = e / (g.ow * g.oh);
    const IndexRange rows = window_extent(i, g.sh, g.ph, g.kh, g.h);
    const IndexRange cols = window_extent(j, g.sw, g.pw, g.kw, g.w);
    const T* xp = x + p * g.h * g.w;
    T best = -T(INFINITY);
    int64_t at = rows.lo * g.w + cols.lo;
    for (int64_t r = rows.lo; r < rows.hi; ++r)
      for (int64_t c = cols.lo; c < cols.hi; ++c) {
        T v = xp[r * g.w + c];
        if (relu == PoolRelu::Input) v = relu_value(v);
        if (v > best || v != v) best = v, at = r * g.w + c;  // v != v: NaN wins
      }
    const bool stopped = relu != PoolRelu::None && !relu_passes(best);
    y[e] = relu == PoolRelu::Output ? relu_value(best) : best;
    idx[e] = stopped ? -1 : int32_t(at);
  }
}

// Each input element gathers the gradients of the windows whose index names it, in window
// order (the CPU's order of additions); an index of −1 names no element.
template <class T>
__global__ void max_pool_backward_kernel(const T* gy, const int32_t* idx, Pool2dGeometry g, T* gx) {
  const int64_t total = g.planes * g.h * g.w;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = e % g.w, r = (e / g.w) % g.h, p = e / (g.w * g.h);
    const IndexRange wi = windows_covering(r, g.sh, g.ph, g.kh, g.oh);
    const IndexRange wj = windows_covering(c, g.sw, g.pw, g.kw, g.ow);
    const T* gp = gy + p * g.oh * g.ow;
    const int32_t* ip = idx + p * g.oh * g.ow;
    const int32_t self = int32_t(r * g.w + c);
    T acc = 0;
    for (int64_t i = wi.lo; i < wi.hi; ++i)
      for (int64_t j = wj.lo; j < wj.hi; ++j) {
        const int64_t k = i * g.ow + j;
        if (ip[k] == self) acc += gp[k];
      }
    gx[e] = acc;
  }
}

template <class T>
__global__ void avg_pool_forward_kernel(const T* x, Pool2dGeometry g, T scale, bool relu, T* y) {
  const int64_t total = g.planes * g.oh * g.ow;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t j = e % g.ow, i = (e / g.ow) % g.oh, p = e / (g.ow * g.oh);
    const IndexRange rows = window_extent(i, g.sh, g.ph, g.kh, g.h);
    const IndexRange cols = window_extent(j, g.sw, g.pw, g.kw, g.w);
    const T* xp = x + p * g.h * g.w;
    T s = 0;
    for (int64_t r = rows.lo; r < rows.hi; ++r)
      for (int64_t c = cols.lo; c < cols.hi; ++c) {
        const T v = xp[r * g.w + c];
        s += relu ? relu_value(v) : v;  // relu as its own kernel
      }
    y[e] = s * scale;
  }
}

// relu_input (null without relu): relu's backward selection on the way out.
template <class T>
__global__ void avg_pool_backward_kernel(const T* gy, Pool2dGeometry g, T scale,
                                         const T* relu_input, T* gx) {
  const int64_t total = g.planes * g.h * g.w;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = e % g.w, r = (e / g.w) % g.h, p = e / (g.w * g.h);
    const IndexRange wi = windows_covering(r, g.sh, g.ph, g.kh, g.oh);
    const IndexRange wj = windows_covering(c, g.sw, g.pw, g.kw, g.ow);
    const T* gp = gy + p * g.oh * g.ow;
    T acc = 0;
    for (int64_t i = wi.lo; i < wi.hi; ++i)
      for (int64_t j = wj.lo; j < wj.hi; ++j) acc += gp[i * g.ow + j] * scale;
    gx[e] = relu_input && !relu_passes(relu_input[e]) ? T(0) : acc;
  }
}

void check_packed(const char* name, std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts)
    FREIGHT_CHECK(t->is_contiguous(), std::string(name) + " (cuda): operands must be contiguous");
}

void max_forward_cuda(const Tensor& x, const Pool2dGeometry& g, PoolRelu relu, Tensor& y,
                      Tensor& indices) {
  check_packed("max_pool2d_forward", {&x, &y, &indices});
  FREIGHT_CHECK(indices.dtype() == DType::I32,
                "max_pool2d_forward (cuda): the indices must be int32");
  const int64_t total = g.planes * g.oh * g.ow;
  if (total == 0) return;
  const int dev = y.device().index;
  set_device(dev);
  dispatch_floating(x.dtype(), "max_pool2d_forward", [&](auto tag) {
    using T = decltype(tag);
    max_pool_forward_kernel<T><<<blocks_for(total), 256, 0, stream(dev)>>>(
        static_cast<const T*>(x.data_ptr()), g, relu, static_cast<T*>(y.data_ptr()),
        static_cast<int32_t*>(indices.data_ptr()));
    FREIGHT_CUDA_CHECK_LAUNCH();
  });
}

void max_backward_cuda(const Tensor& gy, const Tensor& indices, const Pool2dGeometry& g,
                       Tensor& gx) {
  check_packed("max_pool2d_backward", {&gy, &indices, &gx});
  FREIGHT_CHECK(indices.dtype() == DType::I32,
                "max_pool2d_backward (cuda): the indices must be int32");
  const int64_t total = g.planes * g.h * g.w;
  if (total == 0) return;
  const int dev = gx.device().index;
  set_device(dev);
  dispatch_floating(gy.dtype(), "max_pool2d_backward", [&](auto tag) {
    using T = decltype(tag);
    max_pool_backward_kernel<T><<<blocks_for(total), 256, 0, stream(dev)>>>(
        static_cast<const T*>(gy.data_ptr()), static_cast<const int32_t*>(indices.data_ptr()), g,
        static_cast<T*>(gx.data_ptr()));
    FREIGHT_CUDA_CHECK_LAUNCH();
  });
}

void avg_forward_cuda(const Tensor& x, const Pool2dGeometry& g, bool relu, Tensor& y) {
  check_packed("avg_pool2d_forward", {&x, &y});
  const int64_t total = g.planes * g.oh * g.ow;
  if (total == 0) return;
  const int dev = y.device().index;
  set_device(dev);
  dispatch_floating(x.dtype(), "avg_pool2d_forward", [&](auto tag) {
    using T = decltype(tag);
    const T scale = T(1) / T(g.kh * g.kw);  // as the CPU: the full window, in T
    avg_pool_forward_kernel<T><<<blocks_for(total), 256, 0, stream(dev)>>>(
        static_cast<const T*>(x.data_ptr()), g, scale, relu, static_cast<T*>(y.data_ptr()));
    FREIGHT_CUDA_CHECK_LAUNCH();
  });
}

void avg_backward_cuda(const Tensor& gy, const Pool2dGeometry& g, const Tensor& relu_input,
                       Tensor& gx) {
  check_packed("avg_pool2d_backward", {&gy, &gx});
  FREIGHT_CHECK(!relu_input.defined() ||
                    (relu_input.is_contiguous() && relu_input.numel() == gx.numel() &&
                     relu_input.dtype() == gx.dtype() && relu_input.device() == gx.device()),
                "avg_pool2d_backward (cuda): relu's input must be packed like the gradient");
  const int64_t total = g.planes * g.h * g.w;
  if (total == 0) return;
  const int dev = gx.device().index;
  set_device(dev);
  dispatch_floating(gy.dtype(), "avg_pool2d_backward", [&](auto tag) {
    using T = decltype(tag);
    const T scale = T(1) / T(g.kh * g.kw);
    avg_pool_backward_kernel<T><<<blocks_for(total), 256, 0, stream(dev)>>>(
        static_cast<const T*>(gy.data_ptr()), g, scale,
        relu_input.defined() ? static_cast<const T*>(relu_input.data_ptr()) : nullptr,
        static_cast<T*>(gx.data_ptr()));
    FREIGHT_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace

FREIGHT_REGISTER_KERNEL(kernels::max_pool2d_forward, CUDA, max_forward_cuda);
FREIGHT_REGISTER_KERNEL(kernels::max_pool2d_backward, CUDA, max_backward_cuda);
FREIGHT_REGISTER_KERNEL(kernels::avg_pool2d_forward, CUDA, avg_forward_cuda);
FREIGHT_REGISTER_KERNEL(kernels::avg_pool2d_backward, CUDA, avg_backward_cuda);

}  // namespace freight::cuda
