// CUDA kernels of the elementwise family: fill, strided copy with dtype conversion, broadcasting
// binary arithmetic, scalar arithmetic, the unary functions and their derivatives, axpy.
//
// Launch geometry, every kernel here: 256 threads per block, blocks_for(n) blocks, and a
// grid-stride loop over the flat (row-major) element index i of the output, so any n works
// with a bounded grid. Strided operands map i to their own offset with view_offset over views
// coalesced on the host (fewest dimensions); contiguous ones use i directly.
#include <cuda_bf16.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_context.h"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/dispatch.h"
#include "backend/cuda/tensor_args.h"
#include "backend/cuda/unary_rules.cuh"
#include "ops/kernels/elementwise.h"

namespace freight::cuda {
namespace {

template <class T>
__global__ void fill_kernel(T* out, int64_t n, T value) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = value;
}

// Host and device: fill_cuda converts its value on the host. (A __device__-only function called
// from host code inside a generic lambda is not diagnosed by nvcc 13 and silently miscompiles:
// the skeleton's fill did exactly that.)
template <class D, class S>
__host__ __device__ __forceinline__ D convert(S v) {
  if constexpr (std::is_same_v<D, S>)
    return v;  // bit-exact, NaN payloads included (no detour through float for bfloat16)
  else if constexpr (std::is_same_v<D, __nv_bfloat16>)
    return __float2bfloat16(float(v));
  else if constexpr (std::is_same_v<S, __nv_bfloat16>)
    return D(__bfloat162float(v));
  else
    return D(v);
}

template <class S, class D>
__global__ void copy_kernel(const S* src, StridedView sv, D* dst, StridedView dv, int64_t n,
                            bool src_packed, bool dst_packed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t si = src_packed ? i : view_offset(sv, i);
    int64_t di = dst_packed ? i : view_offset(dv, i);
    dst[di] = convert<D>(src[si]);
  }
}

// Calls fn(T{}) with the device type of a dtype.
template <class Fn>
void dispatch(DType t, const char* what, Fn&& fn) {
  switch (t) {
    case DType::F32:
      fn(float{});
      return;
    case DType::F64:
      fn(double{});
      return;
    case DType::BF16:
      fn(__nv_bfloat16{});
      return;
    case DType::I32:
      fn(int32_t{});
      return;
    case DType::I64:
      fn(int64_t{});
      return;
    case DType::U8:
      fn(uint8_t{});
      return;
  }
  throw Error(std::string(what) + " (cuda): unsupported dtype");
}

void fill_cuda(Tensor& out, double value) {
  int dev = out.device().index;
  set_device(dev);
  dispatch(out.dtype(), "fill", [&](auto tag) {
    using T = decltype(tag);
    T v = convert<T>(value);
    int64_t n = out.numel();
    fill_kernel<T><<<blocks_for(n), 256, 0, stream(dev)>>>(static_cast<T*>(out.data_ptr()), n, v);
    FREIGHT_CUDA_CHECK_LAUNCH();
  });
}

void copy_cuda(const Tensor& src, Tensor& dst) {
  int dev = dst.device().index;
  set_device(dev);
  if (src.dtype() == dst.dtype() && src.is_contiguous() && dst.is_contiguous()) {
    FREIGHT_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), dst.nbytes(),
                                       cudaMemcpyDeviceToDevice, stream(dev)));
    return;
  }
  StridedView views[2] = {strided_view(src), strided_view(dst)};
  coalesce(views, 2);
  StridedView sv = views[0], dv = views[1];
  int64_t n = dst.numel();
  dispatch(src.dtype(), "copy", [&](auto stag) {
    dispatch(dst.dtype(), "copy", [&](auto dtag) {
      using S = decltype(stag);
      using D = decltype(dtag);
      copy_kernel<S, D><<<blocks_for(n), 256, 0, stream(dev)>>>(
          static_cast<const S*>(src.data_ptr()), sv, static_cast<D*>(dst.data_ptr()), dv, n,
          src.is_contiguous(), dst.is_contiguous());
      FREIGHT_CUDA_CHECK_LAUNCH();
    });
  });
}

// ---------------------------------------------------------------- binary
// The op is a kernel argument, the same for every thread, so the switch costs a few uniform
// instructions per element of a memory-bound loop (and keeps one kernel per dtype).
template <class T>
__device__ __forceinline__ T binary_value(BinaryOp op, T x, T y) {
  switch (op) {
    case BinaryOp::Add:
      return x + y;
    case BinaryOp::Sub:
      return x - y;
    case BinaryOp::Mul:
      return x * y;
    case BinaryOp::Div:
      return x / y;
    case BinaryOp::AddRelu:  // relu's own rule on the rounded sum
      return relu_value(T(x + y));
  }
  return x;
}

// out[i] = a[i] op b[i] over the output's flat index i (out is contiguous). a and b are views of
// the output's shape; a broadcast operand has stride 0 along its expanded dimensions, so
// view_offset maps every output index to the one element it repeats.
template <class T>
__global__ void binary_kernel(BinaryOp op, const T* a, StridedView av, bool a_packed, const T* b,
                              StridedView bv, bool b_packed, T* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    T x = a[a_packed ? i : view_offset(av, i)];
    T y = b[b_packed ? i : view_offset(bv, i)];
    out[i] = binary_value(op, x, y);
  }
}

void binary_cuda(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  FREIGHT_CHECK(out.is_contiguous(), "binary (cuda): the output must be contiguous");
  int dev = out.device().index;
  set_device(dev);
  StridedView views[3] = {strided_view(a), strided_view(b), strided_view(out)};
  coalesce(views, 3);
  int64_t n = out.numel();
  dispatch_floating(out.dtype(), "binary", [&](auto tag) {
    using T = decltype(tag);
    binary_kernel<T><<<blocks_for(n), 256, 0, stream(dev)>>>(
        op, static_cast<const T*>(a.data_ptr()), views[0], a.is_contiguous(),
        static_cast<const T*>(b.data_ptr()), views[1], b.is_contiguous(),
        static_cast<T*>(out.data_ptr()), n);
    FREIGHT_CUDA_CHECK_LAUNCH();
  });
}

// ---------------------------------------------------------------- scalar and axpy
// y[i] = x[i] · s or x[i] + s (s already converted to T on the host, as the CPU does).
template <class T>
__global__ void scalar_kernel(ScalarOp op, const T* x, T s, T* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    y[i] = op == ScalarOp::Mul ? x[i] * s : x[i] + s;
}

void scalar_cuda(ScalarOp op, const Tensor& a, double s, Tensor& out) {
  FREIGHT_CHECK(a.is_contiguous() && out.is_contiguous(),
                "scalar (cuda): operands must be contiguous");
  int dev = out.device().index;
  set_device(dev);
  int64_t n = out.numel();
  dispatch_floating(out.dtype(), "scalar", [&](auto tag) {
    using T = decltype(tag);
    scalar_kernel<T><<<blocks_for(n), 256, 0, stream(dev)>>>(
        op, static_cast<const T*>(a.data_ptr()), T(s), static_cast<T*>(out.data_ptr()), n);
    FREIGHT_CUDA_CHECK_LAUNCH();
  });
}

// y[i] += alpha · x[i] (gradient accumulation).
template <class T>
__global__ void axpy_kernel(T alpha, const T* x, T* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    y[i] += alpha * x[i];
}

void axpy_cuda(double alpha, const Tensor& x, Tensor& y) {
  FREIGHT_CHECK(x.is_contiguous() && y.is_contiguous() && x.numel() == y.numel(),
                "axpy (cuda): operands must be contiguous and of the same size");
  int dev = y.device().index;
  set_device(dev);
  int64_t n = y.numel();
  dispatch_floating(y.dtype(), "axpy", [&](auto tag) {
    using T = decltype(tag);
    axpy_kernel<T><<<blocks_for(n), 256, 0, stream(dev)>>>(
        T(alpha), static_cast<const T*>(x.data_ptr()), static_cast<T*>(y.data_ptr()), n);
    FREIGHT_CUDA_CHECK_LAUNCH();
  });
}

// ---------------------------------------------------------------- unary
// One case per row of freight/unary_ops.h, each calling the op's rule (unary_rules.cuh).
template <class T>
__device__ __forceinline__ T unary_value(UnaryOp op, T v) {
  switch (op) {
#define FREIGHT_UNARY_CASE(E, ...) \
  case UnaryOp::E:                 \
    return UnaryRule<UnaryOp::E>::value(v);
    FREIGHT_UNARY_OPS(FREIGHT_UNARY_CASE, FREIGHT_UNARY_CASE)
#undef FREIGHT_UNARY_CASE
  }
  return v;
}

template <class T>
__global__ void unary_kernel(UnaryOp op, const T* x, T* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    y[i] = unary_value(op, x[i]);
}

void unary_cuda(UnaryOp op, const Tensor& x, Tensor& y) {
  FREIGHT_CHECK(x.is_contiguous() && y.is_contiguous(),
                "unary (cuda): operands must be contiguous");
  int dev = y.device().index;
  set_device(dev);
  int64_t n = y.numel();
  dispatch_floating(x.dtype(), "unary", [&](auto tag) {
    using T = decltype(tag);
    unary_kernel<T><<<blocks_for(n), 256, 0, stream(dev)>>>(op, static_cast<const T*>(x.data_ptr()),
                                                            static_cast<T*>(y.data_ptr()), n);
    FREIGHT_CUDA_CHECK_LAUNCH();
  });
}

// gx = gy · f'(x) by the op's rule. Only the operand the descriptor says the backward keeps is
// read, so the other may be null.
template <class T>
__device__ __forceinline__ T unary_grad(UnaryOp op, const T* x, const T* y, T g, int64_t i) {
  switch (op) {
#define FREIGHT_UNARY_GRAD_CASE(E, n, Saves, ...)                                            \
  case UnaryOp::E:                                                                           \
    return UnaryRule<UnaryOp::E>::grad(UnarySaves::Saves == UnarySaves::Input ? x[i] : T(0), \
                                       UnarySaves::Saves == UnarySaves::Output ? y[i] : T(0), g);
    FREIGHT_UNARY_OPS(FREIGHT_UNARY_GRAD_CASE, FREIGHT_UNARY_GRAD_CASE)
#undef FREIGHT_UNARY_GRAD_CASE
  }
  return g;
}

template <class T>
__global__ void unary_backward_kernel(UnaryOp op, const T* x, const T* y, const T* gy, T* gx,
                                      int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    gx[i] = unary_grad(op, x, y, gy[i], i);
}

// Which operand the rule of `op` reads: x (the input) or y (the forward output).
bool backward_reads_x(UnaryOp op) {
  return unary_info(op).saves == UnarySaves::Input;
}
bool backward_reads_y(UnaryOp op) {
  return unary_info(op).saves == UnarySaves::Output;
}

void unary_backward_cuda(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& gy,
                         Tensor& gx) {
  bool rx = backward_reads_x(op), ry = backward_reads_y(op);
  FREIGHT_CHECK((!rx || (x.defined() && x.is_contiguous())) &&
                    (!ry || (y.defined() && y.is_contiguous())) && gy.is_contiguous() &&
                    gx.is_contiguous(),
                "unary_backward (cuda): operands must be defined and contiguous");
  int dev = gx.device().index;
  set_device(dev);
  int64_t n = gx.numel();
  dispatch_floating(gx.dtype(), "unary_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* px = rx ? static_cast<const T*>(x.data_ptr()) : nullptr;
    const T* py = ry ? static_cast<const T*>(y.data_ptr()) : nullptr;
    unary_backward_kernel<T><<<blocks_for(n), 256, 0, stream(dev)>>>(
        op, px, py, static_cast<const T*>(gy.data_ptr()), static_cast<T*>(gx.data_ptr()), n);
    FREIGHT_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace

FREIGHT_REGISTER_KERNEL(kernels::fill, CUDA, fill_cuda);
FREIGHT_REGISTER_KERNEL(kernels::copy, CUDA, copy_cuda);
FREIGHT_REGISTER_KERNEL(kernels::binary, CUDA, binary_cuda);
FREIGHT_REGISTER_KERNEL(kernels::scalar, CUDA, scalar_cuda);
FREIGHT_REGISTER_KERNEL(kernels::axpy, CUDA, axpy_cuda);
FREIGHT_REGISTER_KERNEL(kernels::unary, CUDA, unary_cuda);
FREIGHT_REGISTER_KERNEL(kernels::unary_backward, CUDA, unary_backward_cuda);

}  // namespace freight::cuda
