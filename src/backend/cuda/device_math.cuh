// Float and double overloads of the device math functions, so templated kernels call the
// single-precision routine for float (expf, not exp through a double promotion). Accurate
// library versions throughout: the build does not use --use_fast_math.
#pragma once
#include <cuda_runtime.h>

namespace freight::cuda {

__device__ __forceinline__ float d_exp(float x) {
  return expf(x);
}
__device__ __forceinline__ double d_exp(double x) {
  return exp(x);
}
__device__ __forceinline__ float d_log(float x) {
  return logf(x);
}
__device__ __forceinline__ double d_log(double x) {
  return log(x);
}
__device__ __forceinline__ float d_sqrt(float x) {
  return sqrtf(x);
}
__device__ __forceinline__ double d_sqrt(double x) {
  return sqrt(x);
}
__device__ __forceinline__ float d_tanh(float x) {
  return tanhf(x);
}
__device__ __forceinline__ double d_tanh(double x) {
  return tanh(x);
}
__device__ __forceinline__ float d_erf(float x) {
  return erff(x);
}
__device__ __forceinline__ double d_erf(double x) {
  return erf(x);
}

}  // namespace freight::cuda
