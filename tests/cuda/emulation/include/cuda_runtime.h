// Emulated CUDA runtime API (the calls Freight makes), for the CPU emulation in ../README.md.
// Device memory is host memory, streams are synchronous, one device unless EMU_NO_GPU is set.
#pragma once
#include <cstdlib>
#include <cstring>

#include "emu_core.h"

enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidDevice = 101,
  cudaErrorNoDevice = 100,
};
enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4
};
using cudaStream_t = struct CUstream_st*;
constexpr unsigned cudaStreamNonBlocking = 1;
constexpr unsigned cudaHostAllocMapped = 2;
constexpr unsigned cudaHostAllocPortable = 1;

namespace emu {
inline int g_device_count() {
  const char* e = std::getenv("EMU_NO_GPU");
  return e ? 0 : 1;
}
}  // namespace emu

inline cudaError_t cudaGetLastError() {
  auto e = cudaError_t(emu::g_last_error);
  emu::g_last_error = 0;
  return e;
}
inline const char* cudaGetErrorString(cudaError_t e) {
  return e == 0 ? "no error" : "emulated error";
}
inline const char* cudaGetErrorName(cudaError_t e) {
  return e == 0 ? "cudaSuccess" : "cudaErrorEmu";
}
inline cudaError_t cudaGetDeviceCount(int* n) {
  *n = emu::g_device_count();
  return *n ? cudaSuccess : cudaErrorNoDevice;
}
inline cudaError_t cudaSetDevice(int d) {
  return d == 0 ? cudaSuccess : cudaErrorInvalidDevice;
}
inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) {
  static int dummy;
  *s = reinterpret_cast<cudaStream_t>(&dummy);
  return cudaSuccess;
}
inline cudaError_t cudaStreamSynchronize(cudaStream_t) {
  return cudaSuccess;
}
inline cudaError_t cudaMalloc(void** p, size_t n) {
  if (n > (size_t(64) << 30)) return cudaErrorMemoryAllocation;
  *p = std::malloc(n ? n : 1);  // exact size: AddressSanitizer sees overruns
  if (!*p) return cudaErrorMemoryAllocation;
  std::memset(*p, 0xA5, n);  // garbage, as fresh device memory is
  return cudaSuccess;
}
template <class T>
inline cudaError_t cudaMalloc(T** p, size_t n) {
  return cudaMalloc(reinterpret_cast<void**>(p), n);
}
inline cudaError_t cudaFree(void* p) {
  std::free(p);
  return cudaSuccess;
}
inline cudaError_t cudaHostAlloc(void** p, size_t n, unsigned) {
  *p = std::malloc(n);
  return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
inline cudaError_t cudaHostGetDevicePointer(void** d, void* h, unsigned flags) {
  if (flags != 0) return cudaErrorInvalidValue;
  *d = h;
  return cudaSuccess;
}
inline cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind, cudaStream_t) {
  if (n) std::memcpy(d, s, n);
  return cudaSuccess;
}
inline cudaError_t cudaMemsetAsync(void* d, int v, size_t n, cudaStream_t = nullptr) {
  if (n) std::memset(d, v, n);
  return cudaSuccess;
}
inline cudaError_t cudaMemGetInfo(size_t* f, size_t* t) {
  *f = size_t(79) << 30;
  *t = size_t(80) << 30;
  return cudaSuccess;
}
