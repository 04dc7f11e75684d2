#include "gemm_cublas.h"

#include <cmath>

namespace gemm_lab::cuda {

double input_roundoff(CublasMode mode) {
  switch (mode) {
    case CublasMode::kFp32:
      return 0.0;
    case CublasMode::kTf32:
      return std::ldexp(1.0, -10);
    case CublasMode::kBf16:
      return std::ldexp(1.0, -8);
  }
  return 0.0;
}

// cuBLAS is column-major. A row-major m×n matrix in memory is the column-major n×m matrix of its
// transpose, so row-major C = A·B is column-major Cᵀ = Bᵀ·Aᵀ, and the buffers of B and A already
// are Bᵀ (n×k, leading dimension n) and Aᵀ (k×m, leading dimension k): swap the operands, swap m
// and n, and no transposition or copy is needed.
cublasStatus_t cublas_gemm(cublasHandle_t handle, CublasMode mode, const void* a, const void* b,
                           float* c, int m, int n, int k) {
  const float one = 1.0f, zero = 0.0f;
  switch (mode) {
    case CublasMode::kFp32:
      return cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one,
                         static_cast<const float*>(b), n, static_cast<const float*>(a), k, &zero, c,
                         n);
    case CublasMode::kTf32:
      return cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one, b, CUDA_R_32F, n, a,
                          CUDA_R_32F, k, &zero, c, CUDA_R_32F, n, CUBLAS_COMPUTE_32F_FAST_TF32,
                          CUBLAS_GEMM_DEFAULT);
    case CublasMode::kBf16:
      return cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one, b, CUDA_R_16BF, n, a,
                          CUDA_R_16BF, k, &zero, c, CUDA_R_32F, n, CUBLAS_COMPUTE_32F,
                          CUBLAS_GEMM_DEFAULT);
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}

}  // namespace gemm_lab::cuda
