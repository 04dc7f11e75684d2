// CPU kernel of batch gathering (ops/kernels/data.h): the reference for the CUDA kernel and the
// loader's arithmetic, row by row.
#include <fmt/format.h>

#include <cmath>
#include <cstring>

#include "freight/data/normalisation.h"
#include "ops/kernels/data.h"

namespace freight::cpu {
namespace {

void gather_batch_cpu(const Tensor& inputs, const Tensor& labels, const Tensor& order,
                      int64_t begin, double mean, double std, Tensor& x, Tensor& y) {
  int64_t n = inputs.size(0), rows = x.size(0);
  int64_t sample = n > 0 ? inputs.numel() / n : 0, per_label = n > 0 ? labels.numel() / n : 0;
  FREIGHT_CHECK(
      inputs.is_contiguous() && labels.is_contiguous() && order.is_contiguous() &&
          x.is_contiguous() && y.is_contiguous() && order.dtype() == DType::I64 &&
          labels.dtype() == DType::I64 && y.dtype() == DType::I64 && begin >= 0 &&
          begin + rows <= order.numel() && x.numel() == rows * sample &&
          y.numel() == rows * per_label,
      fmt::format("gather_batch (cpu): inconsistent operands (inputs {}, labels {}, "
                  "order {}, begin {}, x {}, y {})",
                  shape_str(inputs.shape()), shape_str(labels.shape()), shape_str(order.shape()),
                  begin, shape_str(x.shape()), shape_str(y.shape())));
  const int64_t* idx = order.data<int64_t>() + begin;
  for (int64_t i = 0; i < rows; ++i)
    FREIGHT_CHECK(idx[i] >= 0 && idx[i] < n,
                  fmt::format("gather_batch (cpu): order entry {} is out of range", idx[i]));
  const int64_t* ls = labels.data<int64_t>();
  int64_t* yd = y.data<int64_t>();
  for (int64_t i = 0; i < rows; ++i)
    std::memcpy(yd + i * per_label, ls + idx[i] * per_label, size_t(per_label) * sizeof(int64_t));
  data::Normalisation nm = data::normalisation(mean, std);
  switch (inputs.dtype()) {
    case DType::U8: {
      const uint8_t* src = inputs.data<uint8_t>();
      float* out = x.data<float>();
      for (int64_t i = 0; i < rows; ++i) {
        const uint8_t* from = src + idx[i] * sample;
        float* to = out + i * sample;
        for (int64_t e = 0; e < sample; ++e) to[e] = std::fma(float(from[e]), nm.scale, nm.shift);
      }
      return;
    }
    case DType::F32: {
      const float* src = inputs.data<float>();
      float* out = x.data<float>();
      for (int64_t i = 0; i < rows; ++i) {
        const float* from = src + idx[i] * sample;
        float* to = out + i * sample;
        for (int64_t e = 0; e < sample; ++e) to[e] = (from[e] - nm.mean) * nm.inv_std;
      }
      return;
    }
    case DType::I64: {
      const int64_t* src = inputs.data<int64_t>();
      int64_t* out = x.data<int64_t>();
      for (int64_t i = 0; i < rows; ++i)
        std::memcpy(out + i * sample, src + idx[i] * sample, size_t(sample) * sizeof(int64_t));
      return;
    }
    default:
      throw Error(
          fmt::format("gather_batch (cpu): inputs of dtype {} (uint8, float32 or int64 "
                      "expected)",
                      dtype_name(inputs.dtype())));
  }
}

}  // namespace

FREIGHT_REGISTER_KERNEL(kernels::gather_batch, CPU, gather_batch_cpu);

}  // namespace freight::cpu
