// Per-device CUDA state shared by the kernels: the stream work is queued on, library handles.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

namespace freight::cuda {

// Makes `device` current for this thread (cheap when it already is).
void set_device(int device);
// The stream all of Freight's work on `device` is queued on (a non-blocking stream, so work can
// be captured into CUDA graphs and overlapped with copies on other streams).
cudaStream_t stream(int device);
cublasHandle_t cublas(int device);

// Launch geometry for a grid-stride loop over n elements.
inline unsigned blocks_for(long long n, unsigned threads = 256) {
  long long b = (n + threads - 1) / threads;
  if (b < 1) b = 1;
  if (b > 65535LL * 32) b = 65535LL * 32;
  return unsigned(b);
}

}  // namespace freight::cuda
