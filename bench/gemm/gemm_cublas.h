// The cuBLAS rows of the CUDA lab: row-major C = A·B through cuBLAS's column-major interface,
// in FP32 and on the tensor cores (TF32 or BF16 inputs, FP32 accumulation). A file of its own so
// that the CPU emulation can check the argument mapping (bench/gemm/emulation/run.sh).
#pragma once
#include <cublas_v2.h>

namespace gemm_lab::cuda {

enum class CublasMode {
  kFp32,  // cublasSgemm, default math mode: true FP32 arithmetic
  kTf32,  // FP32 operands, rounded to TF32 (10-bit mantissa) inside the tensor cores
  kBf16,  // operands already converted to BF16 (a and b point to __nv_bfloat16)
};

// Unit roundoff of the inputs as the tensor cores see them, for the error bound: 0 for FP32;
// 2^-10 for TF32 (the hardware may truncate rather than round the 13 dropped bits); 2^-8 for
// BF16 (converted with round-to-nearest by to_bf16).
double input_roundoff(CublasMode mode);

// Enqueues C = A·B (row-major, A m×k, B k×n, C m×n) on the handle's stream.
cublasStatus_t cublas_gemm(cublasHandle_t handle, CublasMode mode, const void* a, const void* b,
                           float* c, int m, int n, int k);

}  // namespace gemm_lab::cuda
