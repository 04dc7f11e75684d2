// Emulated cuBLAS (the calls Freight makes): a naive column-major GEMM with BLAS semantics,
// including the leading-dimension checks and beta = 0 never reading C, queued on the handle's
// stream (so captured into graphs like the kernels), with cuBLAS's workspace rules (below).
// cublasGemmEx reads bfloat16 or float
// inputs and accumulates in double. See ../README.md.
#pragma once
#include <atomic>
#include <cstdint>
#include <map>

#include "cuda_bf16.h"
#include "cuda_runtime.h"

enum cublasStatus_t {
  CUBLAS_STATUS_SUCCESS = 0,
  CUBLAS_STATUS_INVALID_VALUE = 7,
  CUBLAS_STATUS_NOT_SUPPORTED = 15
};
enum cublasComputeType_t { CUBLAS_COMPUTE_32F = 68, CUBLAS_COMPUTE_64F = 70 };
enum cublasGemmAlgo_t { CUBLAS_GEMM_DEFAULT = -1 };
enum cublasOperation_t { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 };
enum cublasMath_t {
  CUBLAS_DEFAULT_MATH = 0,
  CUBLAS_TENSOR_OP_MATH = 1,
  CUBLAS_PEDANTIC_MATH = 2,
  CUBLAS_TF32_TENSOR_OP_MATH = 3
};
// A handle: its stream and the workspace bound with cublasSetWorkspace. As in cuBLAS,
// cublasSetStream resets the workspace to the library's default pool; a GEMM run without a
// bound workspace then allocates one with cudaMalloc (once per handle and stream), outside the
// caller's allocator, and during a stream capture that allocation invalidates the capture.
// default_workspaces counts those allocations, so a test can see that none happened.
struct cublasContext {
  cudaStream_t stream = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  std::map<cudaStream_t, void*> default_pool;  // the library's own workspaces, per stream
};
using cublasHandle_t = cublasContext*;
namespace emu {
inline std::atomic<int> g_cublas_default_workspaces{0};
constexpr size_t kCublasDefaultWorkspace = size_t(4) << 20;
}  // namespace emu
inline cublasStatus_t cublasCreate(cublasHandle_t* h) {
  *h = new cublasContext();
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasDestroy(cublasHandle_t h) {
  for (auto& [stream, ws] : h->default_pool) std::free(ws);
  delete h;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) {
  h->stream = s;
  h->workspace = nullptr;  // "unconditionally resets the workspace to the default pool"
  h->workspace_bytes = 0;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasSetWorkspace(cublasHandle_t h, void* ws, size_t bytes) {
  if (!ws || !bytes) return CUBLAS_STATUS_INVALID_VALUE;
  h->workspace = ws;
  h->workspace_bytes = bytes;
  return CUBLAS_STATUS_SUCCESS;
}
namespace emu {
// The workspace a GEMM on `h` uses: the bound one, else the default pool's for its stream.
inline cublasStatus_t gemm_workspace(cublasHandle_t h) {
  if (h->workspace) return CUBLAS_STATUS_SUCCESS;
  if (capturing(h->stream)) {
    std::lock_guard<std::mutex> lock(g_capture_mu);
    g_captures[h->stream].invalidated = true;  // an allocation inside the capture
    return CUBLAS_STATUS_SUCCESS;              // (cudaStreamEndCapture reports it)
  }
  if (!h->default_pool.count(h->stream)) {
    h->default_pool[h->stream] = std::malloc(kCublasDefaultWorkspace);
    ++g_cublas_default_workspaces;
  }
  return CUBLAS_STATUS_SUCCESS;
}
}  // namespace emu
inline cublasStatus_t cublasSetMathMode(cublasHandle_t, cublasMath_t) {
  return CUBLAS_STATUS_SUCCESS;
}
inline const char* cublasGetStatusString(cublasStatus_t s) {
  return s ? "emulated cublas error" : "success";
}

namespace emu {
inline double to_double(float v) {
  return v;
}
inline double to_double(double v) {
  return v;
}
inline double to_double(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
// BLAS semantics, column-major; beta == 0 never reads C. The product runs on the handle's
// stream (recorded when it is captured), with alpha and beta read now (host pointers).
template <class TA, class TB, class TC, class S>
cublasStatus_t gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                    int k, const S* alpha_p, const TA* A, int lda, long long sa, const TB* B,
                    int ldb, long long sb, const S* beta_p, TC* C, int ldc, long long sc,
                    int batch) {
  if (m < 0 || n < 0 || k < 0 || batch < 0) return CUBLAS_STATUS_INVALID_VALUE;
  int rows_a = ta == CUBLAS_OP_N ? m : k, rows_b = tb == CUBLAS_OP_N ? k : n;
  if (lda < (rows_a > 1 ? rows_a : 1) || ldb < (rows_b > 1 ? rows_b : 1) || ldc < (m > 1 ? m : 1))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (cublasStatus_t st = gemm_workspace(h)) return st;
  S alpha = *alpha_p, beta = *beta_p;
  enqueue(
      h->stream,
      [=] {
        for (int q = 0; q < batch; ++q) {
          const TA* a = A + q * sa;
          const TB* b = B + q * sb;
          TC* c = C + q * sc;
          for (int j = 0; j < n; ++j)
            for (int i = 0; i < m; ++i) {
              double acc = 0;
              for (int l = 0; l < k; ++l) {
                double x = to_double(ta == CUBLAS_OP_N ? a[i + (long long)l * lda]
                                                       : a[l + (long long)i * lda]);
                double y = to_double(tb == CUBLAS_OP_N ? b[l + (long long)j * ldb]
                                                       : b[j + (long long)l * ldb]);
                acc += x * y;
              }
              TC& out = c[i + (long long)j * ldc];
              out = beta == S(0) ? TC(alpha * acc) : TC(alpha * acc + beta * double(out));
            }
        }
      },
      "a cuBLAS GEMM");
  return CUBLAS_STATUS_SUCCESS;
}

// cublasGemmEx's types: float32 or bfloat16 inputs, float32 output, float32 compute.
template <class TA, class TB>
cublasStatus_t gemm_ex_c(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                         int k, const void* al, const void* A, int lda, long long sa, const void* B,
                         int ldb, long long sb, const void* be, void* C, cudaDataType_t ct, int ldc,
                         long long sc, int batch) {
  if (ct != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  return gemm(h, ta, tb, m, n, k, static_cast<const float*>(al), static_cast<const TA*>(A), lda, sa,
              static_cast<const TB*>(B), ldb, sb, static_cast<const float*>(be),
              static_cast<float*>(C), ldc, sc, batch);
}
inline cublasStatus_t gemm_ex(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                              int n, int k, const void* al, const void* A, cudaDataType_t at,
                              int lda, long long sa, const void* B, cudaDataType_t bt, int ldb,
                              long long sb, const void* be, void* C, cudaDataType_t ct, int ldc,
                              long long sc, int batch, cublasComputeType_t compute) {
  if (compute != CUBLAS_COMPUTE_32F || at != bt) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (at == CUDA_R_16BF)
    return gemm_ex_c<__nv_bfloat16, __nv_bfloat16>(h, ta, tb, m, n, k, al, A, lda, sa, B, ldb, sb,
                                                   be, C, ct, ldc, sc, batch);
  if (at == CUDA_R_32F)
    return gemm_ex_c<float, float>(h, ta, tb, m, n, k, al, A, lda, sa, B, ldb, sb, be, C, ct, ldc,
                                   sc, batch);
  return CUBLAS_STATUS_NOT_SUPPORTED;
}
}  // namespace emu

inline cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                                   int m, int n, int k, const void* al, const void* A,
                                   cudaDataType_t at, int lda, const void* B, cudaDataType_t bt,
                                   int ldb, const void* be, void* C, cudaDataType_t ct, int ldc,
                                   cublasComputeType_t compute, cublasGemmAlgo_t) {
  return emu::gemm_ex(h, ta, tb, m, n, k, al, A, at, lda, 0, B, bt, ldb, 0, be, C, ct, ldc, 0, 1,
                      compute);
}
inline cublasStatus_t cublasGemmStridedBatchedEx(
    cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
    const void* al, const void* A, cudaDataType_t at, int lda, long long sa, const void* B,
    cudaDataType_t bt, int ldb, long long sb, const void* be, void* C, cudaDataType_t ct, int ldc,
    long long sc, int batch, cublasComputeType_t compute, cublasGemmAlgo_t) {
  return emu::gemm_ex(h, ta, tb, m, n, k, al, A, at, lda, sa, B, bt, ldb, sb, be, C, ct, ldc, sc,
                      batch, compute);
}
#define EMU_GEMM(NAME, T)                                                                         \
  inline cublasStatus_t NAME(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, \
                             int n, int k, const T* al, const T* A, int lda, const T* B, int ldb, \
                             const T* be, T* C, int ldc) {                                        \
    return emu::gemm<T, T, T, T>(h, ta, tb, m, n, k, al, A, lda, 0, B, ldb, 0, be, C, ldc, 0, 1); \
  }
#define EMU_GEMM_BATCHED(NAME, T)                                                                 \
  inline cublasStatus_t NAME(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, \
                             int n, int k, const T* al, const T* A, int lda, long long sa,        \
                             const T* B, int ldb, long long sb, const T* be, T* C, int ldc,       \
                             long long sc, int batch) {                                           \
    return emu::gemm<T, T, T, T>(h, ta, tb, m, n, k, al, A, lda, sa, B, ldb, sb, be, C, ldc, sc,  \
                                 batch);                                                          \
  }
EMU_GEMM(cublasSgemm, float)
EMU_GEMM(cublasDgemm, double)
EMU_GEMM_BATCHED(cublasSgemmStridedBatched, float)
EMU_GEMM_BATCHED(cublasDgemmStridedBatched, double)
