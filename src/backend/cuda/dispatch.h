// Dtype dispatch for CUDA kernels: calls fn(T{}) with T the C++ type of the dtype. Float32 and
// float64 for the floating kernels (bfloat16 comes later); anything else is a freight::Error
// naming the kernel, never a silent conversion.
#pragma once
#include <cstdint>
#include <string>

#include "freight/dtype.h"
#include "freight/error.h"

namespace freight::cuda {

[[noreturn]] inline void unsupported_dtype(const char* kernel, DType t, const char* supported) {
  throw Error(std::string(kernel) + " (cuda): dtype " + dtype_name(t) + " is not supported (" +
              supported + " are)");
}

template <class Fn>
void dispatch_floating(DType t, const char* kernel, Fn&& fn) {
  switch (t) {
    case DType::F32:
      fn(float{});
      return;
    case DType::F64:
      fn(double{});
      return;
    default:
      unsupported_dtype(kernel, t, "float32 and float64");
  }
}

}  // namespace freight::cuda
