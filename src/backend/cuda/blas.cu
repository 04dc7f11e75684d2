// GEMM on the GPU through cuBLAS. The row-major to column-major mapping is in gemm_plan.h
// (host code, unit-tested without a GPU).
//
// Batched 3-D operands ([batch, rows, cols], contiguous) use the strided-batched calls with
// stride rows·cols per matrix; a 2-D operand next to a 3-D output is shared by every batch
// (stride 0). With beta = 0 cuBLAS does not read C (its documented rule), so NaN poison in a
// fresh output cannot leak into the result. k = 0 is handled here (C = beta·C) rather than
// relying on the library.
//
// Precision (freight::precision(), runtime.h) applies to float32 GEMMs: under TF32 the handle's
// math mode lets cuBLAS round inputs to TF32 on the tensor cores; under BF16 both inputs are
// converted to bfloat16 (round to nearest even, one copy kernel each) and multiplied by
// cublasGemmEx / cublasGemmStridedBatchedEx with float32 accumulation (CUBLAS_COMPUTE_32F) into
// the float32 output, so the caller sees float32 tensors throughout.
#include <atomic>
#include <climits>

#include "freight/runtime.h"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_context.h"
#include "backend/cuda/dispatch.h"
#include "backend/cuda/gemm_plan.h"
#include "ops/kernels/blas.h"
#include "ops/kernels/elementwise.h"

namespace freight::cuda {

namespace {
constexpr int kNumDTypes = 6;  // DType has six members
constexpr int kFollowPrecision = -1;
std::atomic<int> g_math_mode[kNumDTypes] = {kFollowPrecision, kFollowPrecision, kFollowPrecision,
                                            kFollowPrecision, kFollowPrecision, kFollowPrecision};
}  // namespace

void set_gemm_math_mode(DType dtype, cublasMath_t mode) {
  g_math_mode[int(dtype)].store(int(mode), std::memory_order_relaxed);
}

void clear_gemm_math_mode(DType dtype) {
  g_math_mode[int(dtype)].store(kFollowPrecision, std::memory_order_relaxed);
}

cublasMath_t gemm_math_mode(DType dtype) {
  int mode = g_math_mode[int(dtype)].load(std::memory_order_relaxed);
  if (mode != kFollowPrecision) return cublasMath_t(mode);
  if (dtype == DType::F32 && precision() != Precision::FP32) return CUBLAS_TF32_TENSOR_OP_MATH;
  return CUBLAS_DEFAULT_MATH;
}

namespace {

int to_int(int64_t v, const char* what) {
  FREIGHT_CHECK(v >= 0 && v <= INT_MAX, std::string("gemm (cuda): ") + what + " = " +
                                            std::to_string(v) + " exceeds cuBLAS's 32-bit sizes");
  return int(v);
}

cublasStatus_t gemm_call(cublasHandle_t h, cublasOperation_t op1, cublasOperation_t op2, int n,
                         int m, int k, const float* alpha, const float* b, int ldb,
                         long long stride_b, const float* a, int lda, long long stride_a,
                         const float* beta, float* c, int ldc, long long stride_c, int batch) {
  if (batch == 1) return cublasSgemm(h, op1, op2, n, m, k, alpha, b, ldb, a, lda, beta, c, ldc);
  return cublasSgemmStridedBatched(h, op1, op2, n, m, k, alpha, b, ldb, stride_b, a, lda, stride_a,
                                   beta, c, ldc, stride_c, batch);
}

cublasStatus_t gemm_call(cublasHandle_t h, cublasOperation_t op1, cublasOperation_t op2, int n,
                         int m, int k, const double* alpha, const double* b, int ldb,
                         long long stride_b, const double* a, int lda, long long stride_a,
                         const double* beta, double* c, int ldc, long long stride_c, int batch) {
  if (batch == 1) return cublasDgemm(h, op1, op2, n, m, k, alpha, b, ldb, a, lda, beta, c, ldc);
  return cublasDgemmStridedBatched(h, op1, op2, n, m, k, alpha, b, ldb, stride_b, a, lda, stride_a,
                                   beta, c, ldc, stride_c, batch);
}

// BF16 precision: float32 operands converted to bfloat16 copies, float32 accumulation and
// output. The arguments are those of gemm_call (cuBLAS order: B's buffer first).
void gemm_bf16(cublasHandle_t h, cublasOperation_t op1, cublasOperation_t op2, int n, int m, int k,
               float alpha, const Tensor& b, int ldb, long long stride_b, const Tensor& a, int lda,
               long long stride_a, float beta, Tensor& c, int ldc, long long stride_c, int batch) {
  Tensor a16 = Tensor::empty(a.shape(), DType::BF16, a.device());
  Tensor b16 = Tensor::empty(b.shape(), DType::BF16, b.device());
  kernels::copy(DeviceType::CUDA, a, a16);
  kernels::copy(DeviceType::CUDA, b, b16);
  if (batch == 1) {
    FREIGHT_CUDA_CHECK(cublasGemmEx(h, op1, op2, n, m, k, &alpha, b16.data_ptr(), CUDA_R_16BF, ldb,
                                    a16.data_ptr(), CUDA_R_16BF, lda, &beta, c.data_ptr(),
                                    CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  } else {
    FREIGHT_CUDA_CHECK(cublasGemmStridedBatchedEx(
        h, op1, op2, n, m, k, &alpha, b16.data_ptr(), CUDA_R_16BF, ldb, stride_b, a16.data_ptr(),
        CUDA_R_16BF, lda, stride_a, &beta, c.data_ptr(), CUDA_R_32F, ldc, stride_c, batch,
        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
}

void gemm_cuda(const Tensor& a, bool ta, const Tensor& b, bool tb, Tensor& c, double alpha,
               double beta) {
  FREIGHT_CHECK(a.is_contiguous() && b.is_contiguous() && c.is_contiguous(),
                "gemm (cuda): operands must be contiguous");
  FREIGHT_CHECK((c.dim() == 2 || c.dim() == 3) && (a.dim() == 2 || a.dim() == 3) &&
                    (b.dim() == 2 || b.dim() == 3) &&
                    (c.dim() == 3 || (a.dim() == 2 && b.dim() == 2)),
                "gemm (cuda): operands must be 2-D, or 3-D batched with a 3-D output");
  bool batched = c.dim() == 3;
  int64_t batch = batched ? c.size(0) : 1;
  int64_t m = c.size(-2), n = c.size(-1);
  int64_t k = ta ? a.size(-2) : a.size(-1);
  FREIGHT_CHECK((ta ? a.size(-1) : a.size(-2)) == m && (tb ? b.size(-2) : b.size(-1)) == n &&
                    (tb ? b.size(-1) : b.size(-2)) == k && (a.dim() == 2 || a.size(0) == batch) &&
                    (b.dim() == 2 || b.size(0) == batch),
                "gemm (cuda): operand shapes do not match the output");
  if (c.numel() == 0) return;
  int dev = c.device().index;
  set_device(dev);
  if (k == 0) {  // an empty sum: C = beta·C, and exactly 0 when beta = 0 (NaN poison ignored)
    if (beta == 0.0)
      kernels::fill(DeviceType::CUDA, c, 0.0);
    else if (beta != 1.0)
      kernels::scalar(DeviceType::CUDA, ScalarOp::Mul, c, beta, c);
    return;
  }
  // The handle was bound to the device's stream, and then to Freight's workspace, once when the
  // device was set up (cuda_backend.cpp). It is never re-bound here: cublasSetStream resets the
  // workspace to cuBLAS's default pool, which cuBLAS then allocates itself, outside the caching
  // allocator and possibly inside a graph capture. The math mode is set on every call, as it
  // follows the precision and the dtype.
  cublasHandle_t h = cublas(dev);
  FREIGHT_CUDA_CHECK(cublasSetMathMode(h, gemm_math_mode(c.dtype())));
  GemmPlan p = plan_gemm(int(a.dim()), a.shape().data(), ta, int(b.dim()), b.shape().data(), tb,
                         int(c.dim()), c.shape().data());
  cublasOperation_t op_first = p.trans_first ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t op_second = p.trans_second ? CUBLAS_OP_T : CUBLAS_OP_N;
  int rows = to_int(p.rows, "n"), cols = to_int(p.cols, "m"), depth = to_int(p.depth, "k");
  int ld_first = to_int(p.ld_first, "ldb"), ld_second = to_int(p.ld_second, "lda");
  int ld_out = to_int(p.ld_out, "ldc"), ib = to_int(p.batch, "batch");
  if (c.dtype() == DType::F32 && precision() == Precision::BF16) {
    gemm_bf16(h, op_first, op_second, rows, cols, depth, float(alpha), b, ld_first, p.stride_first,
              a, ld_second, p.stride_second, float(beta), c, ld_out, p.stride_out, ib);
    return;
  }
  dispatch_floating(c.dtype(), "gemm", [&](auto tag) {
    using T = decltype(tag);
    T al = T(alpha), be = T(beta);
    FREIGHT_CUDA_CHECK(gemm_call(h, op_first, op_second, rows, cols, depth, &al,
                                 static_cast<const T*>(b.data_ptr()), ld_first, p.stride_first,
                                 static_cast<const T*>(a.data_ptr()), ld_second, p.stride_second,
                                 &be, static_cast<T*>(c.data_ptr()), ld_out, p.stride_out, ib));
  });
}

}  // namespace

FREIGHT_REGISTER_KERNEL(kernels::gemm, CUDA, gemm_cuda);

}  // namespace freight::cuda
