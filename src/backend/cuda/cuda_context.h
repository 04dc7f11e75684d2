// Per-device CUDA state shared by the kernels: the stream work is queued on, library handles.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "freight/dtype.h"

namespace freight::cuda {

// Makes `device` current for this thread (cheap when it already is).
void set_device(int device);
// The stream all of Freight's work on `device` is queued on (a non-blocking stream, so work can
// be captured into CUDA graphs and overlapped with copies on other streams).
cudaStream_t stream(int device);
// The device's second stream, for host-to-device copies of input batches that overlap the
// compute stream's work (DeviceBackend::upload orders them with events).
cudaStream_t copy_stream(int device);
// The cuBLAS handle of `device`, bound to its stream, with a workspace of its own (so cuBLAS
// never allocates, which a CUDA graph capture would not allow).
cublasHandle_t cublas(int device);

// A device buffer of `bytes` for the CUDA graph this thread is capturing on `device`, whose
// contents the host writes outside the graph and every replay reads (the optimizers' tables).
// It is never a block that the capture's other allocations use or reuse (the graph's pool
// recycles blocks freed during the capture, and a replay would overwrite them), and it is
// freed when the graph is destroyed. Only during a capture.
void* allocate_graph_constant(int device, size_t bytes);

// Random numbers inside CUDA graphs. A kernel that draws from Philox at (seed, offset) gets the
// offset by value, which a graph would replay unchanged: the same dropout mask every step. So
// while `device`'s stream is being captured this returns a device address that holds, at each
// replay, how far the default generator has moved since the capture (the graph writes it before
// running), and such a kernel draws at offset + *delta; otherwise nullptr (draw at offset).
const uint64_t* graph_rng_delta(int device);
// *dst = value, queued on `s` (graph_kernels.cu).
void write_u64_async(uint64_t* dst, uint64_t value, cudaStream_t s);

// cuBLAS math mode used by GEMMs of `dtype` (applied before each call, so it takes effect at
// once on every device). By default it follows freight::precision() (runtime.h) for float32:
// CUBLAS_DEFAULT_MATH (full FP32, no TF32) under FP32, CUBLAS_TF32_TENSOR_OP_MATH (TF32 tensor
// cores: 10-bit mantissa inputs, FP32 accumulation) under TF32 and BF16; other dtypes use
// CUBLAS_DEFAULT_MATH. set_gemm_math_mode overrides that for one dtype (CUBLAS_PEDANTIC_MATH
// forbids every shortcut); clear_gemm_math_mode returns it to the default. Defined in blas.cu.
void set_gemm_math_mode(DType dtype, cublasMath_t mode);
void clear_gemm_math_mode(DType dtype);
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
