// CUDA kernels of batch gathering (ops/kernels/data.h) for --data-on-device: one thread per
// element of the batch (256 per block, grid-stride), row i of the batch reading sample
// order[begin + i]. The pixel map is one fused multiply-add with the loader's float constants
// (__fmaf_rn: the CPU loader calls std::fma), so the batch is bit-identical to the loader's.
#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_context.h"
#include "freight/data/normalisation.h"
#include "ops/kernels/data.h"

namespace freight::cuda {
namespace {

__global__ void gather_u8_kernel(const uint8_t* src, const int64_t* order, int64_t rows,
                                 int64_t sample, float scale, float shift, float* out) {
  int64_t total = rows * sample;
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < total;
       k += int64_t(gridDim.x) * blockDim.x) {
    int64_t i = k / sample, e = k % sample;
    out[k] = __fmaf_rn(float(src[order[i] * sample + e]), scale, shift);
  }
}

__global__ void gather_f32_kernel(const float* src, const int64_t* order, int64_t rows,
                                  int64_t sample, float mean, float inv_std, float* out) {
  int64_t total = rows * sample;
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < total;
       k += int64_t(gridDim.x) * blockDim.x) {
    int64_t i = k / sample, e = k % sample;
    out[k] = (src[order[i] * sample + e] - mean) * inv_std;  // no fma: a product of a difference
  }
}

__global__ void gather_i64_kernel(const int64_t* src, const int64_t* order, int64_t rows,
                                  int64_t sample, int64_t* out) {
  int64_t total = rows * sample;
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < total;
       k += int64_t(gridDim.x) * blockDim.x) {
    int64_t i = k / sample, e = k % sample;
    out[k] = src[order[i] * sample + e];
  }
}

void gather_batch_cuda(const Tensor& inputs, const Tensor& labels, const Tensor& order,
                       int64_t begin, double mean, double std, Tensor& x, Tensor& y) {
  int64_t n = inputs.size(0), rows = x.size(0);
  int64_t sample = n > 0 ? inputs.numel() / n : 0, per_label = n > 0 ? labels.numel() / n : 0;
  FREIGHT_CHECK(inputs.is_contiguous() && labels.is_contiguous() && order.is_contiguous() &&
                    x.is_contiguous() && y.is_contiguous() && order.dtype() == DType::I64 &&
                    labels.dtype() == DType::I64 && y.dtype() == DType::I64 && begin >= 0 &&
                    begin + rows <= order.numel() && x.numel() == rows * sample &&
                    y.numel() == rows * per_label,
                "gather_batch (cuda): inconsistent operands");
  if (rows == 0) return;
  int dev = x.device().index;
  set_device(dev);
  cudaStream_t s = stream(dev);
  const int64_t* idx = static_cast<const int64_t*>(order.data_ptr()) + begin;
  if (per_label > 0) {
    gather_i64_kernel<<<blocks_for(rows * per_label), 256, 0, s>>>(
        static_cast<const int64_t*>(labels.data_ptr()), idx, rows, per_label,
        static_cast<int64_t*>(y.data_ptr()));
    FREIGHT_CUDA_CHECK_LAUNCH();
  }
  if (sample == 0) return;
  data::Normalisation nm = data::normalisation(mean, std);
  switch (inputs.dtype()) {
    case DType::U8:
      FREIGHT_CHECK(x.dtype() == DType::F32, "gather_batch (cuda): uint8 inputs fill float32 x");
      gather_u8_kernel<<<blocks_for(rows * sample), 256, 0, s>>>(
          static_cast<const uint8_t*>(inputs.data_ptr()), idx, rows, sample, nm.scale, nm.shift,
          static_cast<float*>(x.data_ptr()));
      break;
    case DType::F32:
      FREIGHT_CHECK(x.dtype() == DType::F32, "gather_batch (cuda): float32 inputs fill float32 x");
      gather_f32_kernel<<<blocks_for(rows * sample), 256, 0, s>>>(
          static_cast<const float*>(inputs.data_ptr()), idx, rows, sample, nm.mean, nm.inv_std,
          static_cast<float*>(x.data_ptr()));
      break;
    case DType::I64:
      FREIGHT_CHECK(x.dtype() == DType::I64, "gather_batch (cuda): int64 inputs fill int64 x");
      gather_i64_kernel<<<blocks_for(rows * sample), 256, 0, s>>>(
          static_cast<const int64_t*>(inputs.data_ptr()), idx, rows, sample,
          static_cast<int64_t*>(x.data_ptr()));
      break;
    default:
      throw Error(std::string("gather_batch (cuda): inputs of dtype ") +
                  dtype_name(inputs.dtype()) + " (uint8, float32 or int64 expected)");
  }
  FREIGHT_CUDA_CHECK_LAUNCH();
}

}  // namespace

FREIGHT_REGISTER_KERNEL(kernels::gather_batch, CUDA, gather_batch_cuda);

}  // namespace freight::cuda
