// What the GEMM lab uses beyond the part of CUDA that tests/cuda/emulation provides: the float4
// vector type, the alignment and launch-bounds qualifiers, and cublasGemmEx for the tensor-core
// rows. Force-included (-include) before the translated kernels by run.sh; never part of a real
// CUDA build.
#pragma once
#include <cstring>

#include "cublas_v2.h"     // the emulated cuBLAS (cublasSgemm: a naive column-major GEMM)
#include "cuda_bf16.h"     // the emulated bfloat16
#include "cuda_runtime.h"  // the emulated runtime: __global__, threadIdx, launches, barriers

struct alignas(16) float4 {
  float x, y, z, w;
};
inline float4 make_float4(float x, float y, float z, float w) {
  return float4{x, y, z, w};
}
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...)

// cublasGemmEx for the two calls the lab makes: FP32 operands with TF32 tensor-core math, and
// BF16 operands, both with FP32 output. Column-major with BLAS argument checks, like the
// emulator's cublasSgemm. TF32 is emulated by truncating each operand to its top 19 bits (what
// the tensor cores may do; rounding would be more accurate), so the lab's TF32 error bound is
// tested against the worse case.
enum cudaDataType_t { CUDA_R_32F = 0, CUDA_R_16BF = 14 };
enum cublasComputeType_t { CUBLAS_COMPUTE_32F = 68, CUBLAS_COMPUTE_32F_FAST_TF32 = 77 };
enum cublasGemmAlgo_t { CUBLAS_GEMM_DEFAULT = -1 };

namespace emu {
inline float gemm_ex_operand(const void* base, cudaDataType_t type, long long index, bool tf32) {
  if (type == CUDA_R_16BF) return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[index]);
  float v = static_cast<const float*>(base)[index];
  if (tf32) {
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    bits &= 0xffffe000u;  // keep sign, exponent and the top 10 mantissa bits
    std::memcpy(&v, &bits, 4);
  }
  return v;
}
}  // namespace emu

inline cublasStatus_t cublasGemmEx(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb,
                                   int m, int n, int k, const void* alpha, const void* A,
                                   cudaDataType_t at, int lda, const void* B, cudaDataType_t bt,
                                   int ldb, const void* beta, void* C, cudaDataType_t ct, int ldc,
                                   cublasComputeType_t compute, cublasGemmAlgo_t) {
  if (m < 0 || n < 0 || k < 0 || ct != CUDA_R_32F || at != bt) return CUBLAS_STATUS_INVALID_VALUE;
  const bool tf32 = compute == CUBLAS_COMPUTE_32F_FAST_TF32;
  if (tf32 && at != CUDA_R_32F) return CUBLAS_STATUS_INVALID_VALUE;
  const int rows_a = ta == CUBLAS_OP_N ? m : k, rows_b = tb == CUBLAS_OP_N ? k : n;
  if (lda < (rows_a > 1 ? rows_a : 1) || ldb < (rows_b > 1 ? rows_b : 1) || ldc < (m > 1 ? m : 1))
    return CUBLAS_STATUS_INVALID_VALUE;
  const float al = *static_cast<const float*>(alpha), be = *static_cast<const float*>(beta);
  float* c = static_cast<float*>(C);
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      double acc = 0;
      for (int l = 0; l < k; ++l) {
        const long long ia = ta == CUBLAS_OP_N ? i + (long long)l * lda : l + (long long)i * lda;
        const long long ib = tb == CUBLAS_OP_N ? l + (long long)j * ldb : j + (long long)l * ldb;
        acc +=
            double(emu::gemm_ex_operand(A, at, ia, tf32)) * emu::gemm_ex_operand(B, bt, ib, tf32);
      }
      float& out = c[i + (long long)j * ldc];
      out = be == 0.0f ? float(al * acc) : float(al * acc + be * out);
    }
  return CUBLAS_STATUS_SUCCESS;
}
