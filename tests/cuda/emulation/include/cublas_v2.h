// Emulated cuBLAS (the calls Freight makes): a naive column-major GEMM with BLAS semantics,
// including the leading-dimension checks and beta = 0 never reading C. See ../README.md.
#pragma once
#include <cstdint>

#include "cuda_runtime.h"

enum cublasStatus_t { CUBLAS_STATUS_SUCCESS = 0, CUBLAS_STATUS_INVALID_VALUE = 7 };
enum cublasOperation_t { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 };
enum cublasMath_t {
  CUBLAS_DEFAULT_MATH = 0,
  CUBLAS_TENSOR_OP_MATH = 1,
  CUBLAS_PEDANTIC_MATH = 2,
  CUBLAS_TF32_TENSOR_OP_MATH = 3
};
using cublasHandle_t = struct cublasContext*;
inline cublasStatus_t cublasCreate(cublasHandle_t* h) {
  static int dummy;
  *h = reinterpret_cast<cublasHandle_t>(&dummy);
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasSetStream(cublasHandle_t, cudaStream_t) {
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasSetMathMode(cublasHandle_t, cublasMath_t) {
  return CUBLAS_STATUS_SUCCESS;
}
inline const char* cublasGetStatusString(cublasStatus_t s) {
  return s ? "emulated cublas error" : "success";
}

namespace emu {
// BLAS semantics, column-major; beta == 0 never reads C.
template <class T>
cublasStatus_t gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const T* alpha,
                    const T* A, int lda, long long sa, const T* B, int ldb, long long sb,
                    const T* beta, T* C, int ldc, long long sc, int batch) {
  if (m < 0 || n < 0 || k < 0 || batch < 0) return CUBLAS_STATUS_INVALID_VALUE;
  int rows_a = ta == CUBLAS_OP_N ? m : k, rows_b = tb == CUBLAS_OP_N ? k : n;
  if (lda < (rows_a > 1 ? rows_a : 1) || ldb < (rows_b > 1 ? rows_b : 1) || ldc < (m > 1 ? m : 1))
    return CUBLAS_STATUS_INVALID_VALUE;
  for (int q = 0; q < batch; ++q) {
    const T* a = A + q * sa;
    const T* b = B + q * sb;
    T* c = C + q * sc;
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < m; ++i) {
        double acc = 0;
        for (int l = 0; l < k; ++l) {
          double x = ta == CUBLAS_OP_N ? a[i + (long long)l * lda] : a[l + (long long)i * lda];
          double y = tb == CUBLAS_OP_N ? b[l + (long long)j * ldb] : b[j + (long long)l * ldb];
          acc += x * y;
        }
        T& out = c[i + (long long)j * ldc];
        out = *beta == T(0) ? T(*alpha * acc) : T(*alpha * acc + *beta * out);
      }
  }
  return CUBLAS_STATUS_SUCCESS;
}
}  // namespace emu
#define EMU_GEMM(NAME, T)                                                                         \
  inline cublasStatus_t NAME(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m,   \
                             int n, int k, const T* al, const T* A, int lda, const T* B, int ldb, \
                             const T* be, T* C, int ldc) {                                        \
    return emu::gemm<T>(ta, tb, m, n, k, al, A, lda, 0, B, ldb, 0, be, C, ldc, 0, 1);             \
  }
#define EMU_GEMM_BATCHED(NAME, T)                                                               \
  inline cublasStatus_t NAME(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m, \
                             int n, int k, const T* al, const T* A, int lda, long long sa,      \
                             const T* B, int ldb, long long sb, const T* be, T* C, int ldc,     \
                             long long sc, int batch) {                                         \
    return emu::gemm<T>(ta, tb, m, n, k, al, A, lda, sa, B, ldb, sb, be, C, ldc, sc, batch);    \
  }
EMU_GEMM(cublasSgemm, float)
EMU_GEMM(cublasDgemm, double)
EMU_GEMM_BATCHED(cublasSgemmStridedBatched, float)
EMU_GEMM_BATCHED(cublasDgemmStridedBatched, double)
