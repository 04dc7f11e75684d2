// CUDA kernels of the elementwise family (fill and strided copy with dtype conversion so far).
#include <cuda_bf16.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_context.h"
#include "backend/cuda/tensor_args.h"
#include "ops/kernels/elementwise.h"

namespace freight::cuda {
namespace {

template <class T>
__global__ void fill_kernel(T* out, int64_t n, T value) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = value;
}

template <class D, class S>
__device__ __forceinline__ D convert(S v) {
  if constexpr (std::is_same_v<D, __nv_bfloat16>)
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
    case DType::F32: fn(float{}); return;
    case DType::F64: fn(double{}); return;
    case DType::BF16: fn(__nv_bfloat16{}); return;
    case DType::I32: fn(int32_t{}); return;
    case DType::I64: fn(int64_t{}); return;
    case DType::U8: fn(uint8_t{}); return;
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
  StridedView sv = strided_view(src), dv = strided_view(dst);
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

}  // namespace

FREIGHT_REGISTER_KERNEL(kernels::fill, CUDA, fill_cuda);
FREIGHT_REGISTER_KERNEL(kernels::copy, CUDA, copy_cuda);

}  // namespace freight::cuda
