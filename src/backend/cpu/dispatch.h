// Dtype dispatch for CPU kernels: calls fn(T{}) with T the C++ type of the tensor's dtype.
#pragma once
#include <fmt/format.h>

#include "freight/dtype.h"
#include "freight/error.h"

namespace freight::cpu {

template <class Fn>
void dispatch_floating(DType t, const char* kernel, Fn&& fn) {
  switch (t) {
    case DType::F32: fn(float{}); return;
    case DType::F64: fn(double{}); return;
    default:
      throw Error(fmt::format("{} (cpu): dtype {} is not supported (float32 and float64 are)",
                              kernel, dtype_name(t)));
  }
}

template <class Fn>
void dispatch_all(DType t, const char* kernel, Fn&& fn) {
  switch (t) {
    case DType::F32: fn(float{}); return;
    case DType::F64: fn(double{}); return;
    case DType::I32: fn(int32_t{}); return;
    case DType::I64: fn(int64_t{}); return;
    case DType::U8: fn(uint8_t{}); return;
    default:
      throw Error(fmt::format("{} (cpu): dtype {} is not supported", kernel, dtype_name(t)));
  }
}

}  // namespace freight::cpu
