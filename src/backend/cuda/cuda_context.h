// Per-device CUDA state shared by the kernels: the stream work is queued on, library handles.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "freight/dtype.h"

namespace freight::cuda {

// Makes `device` current for this thread (cheap when it already is).
void set_device(int device);
// The stream all of Freight's work on `device` is queued on (a non-blocking stream, so work can
// be captured into CUDA graphs and overlapped with copies on other streams).
cudaStream_t stream(int device);
cublasHandle_t cublas(int device);

// cuBLAS math mode used by GEMMs of `dtype` (applied before each call, so it takes effect at
// once on every device). Default for every dtype: CUBLAS_DEFAULT_MATH, which for float32 means
// full FP32 arithmetic, no TF32. CUBLAS_TF32_TENSOR_OP_MATH lets float32 GEMMs use TF32 tensor
// cores (10-bit mantissa inputs, FP32 accumulation); CUBLAS_PEDANTIC_MATH forbids every
// shortcut. Defined in blas.cu.
void set_gemm_math_mode(DType dtype, cublasMath_t mode);
cublasMath_t gemm_math_mode(DType dtype);

// Deterministic mode (freight::set_deterministic reaches it through the backend): when on,
// kernels that choose among algorithms (the cuDNN convolutions) take only those whose results
// are reproducible run to run. Read when an algorithm is chosen; choices are cached per mode.
// Defined in cuda_backend.cpp.
void set_deterministic(bool on);
bool deterministic();

// Launch geometry for a grid-stride loop over n elements.
inline unsigned blocks_for(long long n, unsigned threads = 256) {
  long long b = (n + threads - 1) / threads;
  if (b < 1) b = 1;
  if (b > 65535LL * 32) b = 65535LL * 32;
  return unsigned(b);
}

// Launch geometry for kernels that give each row (or slice) one block and loop over rows with
// a grid stride: the number of blocks, at least 1.
inline unsigned blocks_for_rows(long long rows) {
  if (rows < 1) rows = 1;
  if (rows > 65535LL * 32) rows = 65535LL * 32;
  return unsigned(rows);
}

// Threads per block for a block-per-row kernel over rows of n elements: one warp for short
// rows (10 classes, say), up to 256 threads for long ones; always a multiple of 32, as the
// block reductions require.
inline unsigned threads_for_row(long long n) {
  if (n <= 64) return 32;
  if (n <= 256) return 64;
  if (n <= 1024) return 128;
  return 256;
}

}  // namespace freight::cuda
