// The CUDA kernels of the GEMM lab (gemm_kernels.cu), behind plain launch functions so that the
// host program is ordinary C++. Same layout as the CPU lab: row-major A (m×k), B (k×n), C (m×n),
// C = A·B overwritten. Pointers are device pointers; each function only enqueues a launch on
// `stream`, and the caller checks cudaGetLastError() after it.
//
// The same file compiles against the CPU emulation of CUDA in tests/cuda/emulation, which runs
// the kernels with sanitizers (bench/gemm/emulation/run.sh).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

struct __nv_bfloat16;

namespace gemm_lab::cuda {

// (1) One thread per element of C, operands read straight from global memory.
void gemm_naive(const float* a, const float* b, float* c, int m, int n, int k, cudaStream_t stream);

// (2) Blocks of kTile×kTile threads stage kTile×kTile tiles of A and B in shared memory.
inline constexpr int kTile = 32;
void gemm_smem_tiled(const float* a, const float* b, float* c, int m, int n, int k,
                     cudaStream_t stream);
// The same kernel with 16×16 tiles (the emulation check runs both sizes).
void gemm_smem_tiled16(const float* a, const float* b, float* c, int m, int n, int k,
                       cudaStream_t stream);

// (3) Blocks of 256 threads compute 128×128 tiles of C; each thread an 8×8 micro-tile in
// registers from 8-deep slices of A and B in shared memory (double-buffered), loaded with
// 16-byte vector loads when k and n are multiples of 4 (scalar loads otherwise).
void gemm_register_tiled(const float* a, const float* b, float* c, int m, int n, int k,
                         cudaStream_t stream);
// Which path gemm_register_tiled takes for these operands.
bool register_tiled_uses_vector_loads(const float* a, const float* b, const float* c, int n, int k);

// float32 → bfloat16 (round to nearest even), for the tensor-core comparison.
void to_bf16(const float* x, __nv_bfloat16* y, int64_t count, cudaStream_t stream);

}  // namespace gemm_lab::cuda
