// Runs the GEMM lab's CUDA kernels (gemm_kernels.cu, translated by tests/cuda/emulation/
// translate.py) on the CPU emulation of CUDA, with AddressSanitizer and UBSan, and checks every
// result against the float64 reference with the same error bound as the lab. Built and run by
// run.sh, in both of the emulator's warp schedules.
//
// What this proves: the indexing of every kernel (tile edges in both directions, sizes that are
// not multiples of any tile, the scalar and the vector paths), that every element of C is
// written (C starts as NaN), that no access leaves the matrices (exact-size allocations under
// AddressSanitizer, and UBSan checks the alignment of every float4 access), and that the
// __syncthreads discipline of the shared-memory kernels holds (the serial schedule runs one warp
// far ahead of the others). What it cannot prove: anything about speed or real hardware.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "gemm_check.h"
#include "gemm_cublas.h"
#include "gemm_kernels.h"

using namespace gemm_lab;

namespace {

using Launch = std::function<void(const float*, const float*, float*, int, int, int)>;

// Device buffers of exactly the requested size (the emulator's cudaMalloc), optionally starting
// one float in, to make a pointer that is not 16-byte aligned.
struct DeviceMatrix {
  float* base = nullptr;
  float* data = nullptr;
  DeviceMatrix(size_t count, int offset) {
    if (cudaMalloc(&base, (count + offset) * sizeof(float)) != cudaSuccess) std::abort();
    data = base + offset;
  }
  ~DeviceMatrix() { cudaFree(base); }
};

int failures = 0, runs = 0;

void check(const char* name, const Launch& launch, Shape s, int offset, bool expect_vector,
           double input_roundoff = 0) {
  std::vector<float> a(size_t(s.m * s.k)), b(size_t(s.k * s.n)), c(size_t(s.m * s.n));
  fill_uniform(a, 7 + uint64_t(s.m));
  fill_uniform(b, 9 + uint64_t(s.n));
  DeviceMatrix da(a.size(), offset), db(b.size(), offset), dc(c.size(), offset);
  cudaMemcpyAsync(da.data, a.data(), a.size() * sizeof(float), cudaMemcpyHostToDevice, nullptr);
  cudaMemcpyAsync(db.data, b.data(), b.size() * sizeof(float), cudaMemcpyHostToDevice, nullptr);
  const float nan = std::nanf("");
  for (size_t i = 0; i < c.size(); ++i) dc.data[i] = nan;  // every element must be written
  if (expect_vector !=
          cuda::register_tiled_uses_vector_loads(da.data, db.data, dc.data, int(s.n), int(s.k)) &&
      std::strcmp(name, "register tiles") == 0) {
    std::printf("FAIL %s %lldx%lldx%lld: wrong load path chosen\n", name, (long long)s.m,
                (long long)s.n, (long long)s.k);
    ++failures;
  }
  launch(da.data, db.data, dc.data, int(s.m), int(s.n), int(s.k));
  if (cudaGetLastError() != cudaSuccess) {
    std::printf("FAIL %s %lldx%lldx%lld: launch error\n", name, (long long)s.m, (long long)s.n,
                (long long)s.k);
    ++failures;
    return;
  }
  std::memcpy(c.data(), dc.data, c.size() * sizeof(float));
  const Reference ref(a.data(), b.data(), s);
  const CheckResult r = ref.check(c.data(), error_bound(s.k, input_roundoff));
  ++runs;
  std::printf("%s %-15s %4lldx%-4lldx%-4lld%s: %s\n", r.ok() ? "ok  " : "FAIL", name,
              (long long)s.m, (long long)s.n, (long long)s.k,
              offset ? " (unaligned)" : (expect_vector ? " (vector)   " : "            "),
              r.describe().c_str());
  if (!r.ok()) ++failures;
}

}  // namespace

int main() {
  struct Kernel {
    const char* name;
    Launch launch;
  };
  const Kernel kernels[] = {
      {"naive", [](const float* a, const float* b, float* c, int m, int n,
                   int k) { cuda::gemm_naive(a, b, c, m, n, k, nullptr); }},
      {"shared 32x32", [](const float* a, const float* b, float* c, int m, int n,
                          int k) { cuda::gemm_smem_tiled(a, b, c, m, n, k, nullptr); }},
      {"shared 16x16", [](const float* a, const float* b, float* c, int m, int n,
                          int k) { cuda::gemm_smem_tiled16(a, b, c, m, n, k, nullptr); }},
      {"register tiles", [](const float* a, const float* b, float* c, int m, int n,
                            int k) { cuda::gemm_register_tiled(a, b, c, m, n, k, nullptr); }},
  };
  // Odd sizes (the scalar path of the register kernel), multiples of 4 that are not multiples
  // of any tile (its vector path), a single element, a vector, an empty sum, more than one
  // 128×128 tile in both directions, and sizes exactly on the tile edges.
  struct Case {
    Shape s;
    bool vector;
  };
  const Case cases[] = {
      {{67, 45, 31}, false},   {{1, 1, 1}, false},     {{3, 100, 7}, false},
      {{130, 133, 37}, false}, {{5, 7, 0}, false},     {{132, 260, 36}, true},
      {{4, 4, 4}, true},       {{128, 128, 16}, true}, {{257, 136, 20}, true},
  };
  for (const Kernel& kernel : kernels) {
    for (const Case& c : cases) check(kernel.name, kernel.launch, c.s, 0, c.vector);
    // Sizes that allow vector loads, with pointers that do not: the scalar path must be taken.
    check(kernel.name, kernel.launch, Shape{132, 260, 36}, 1, false);
  }
  // The cuBLAS rows: the row-major to column-major mapping, and (on BF16) to_bf16, with the
  // error bounds the lab uses. The emulated cuBLAS is a plain loop; this checks our arguments.
  cublasHandle_t handle;
  cublasCreate(&handle);
  for (cuda::CublasMode mode :
       {cuda::CublasMode::kFp32, cuda::CublasMode::kTf32, cuda::CublasMode::kBf16}) {
    const char* name = mode == cuda::CublasMode::kFp32   ? "cuBLAS FP32"
                       : mode == cuda::CublasMode::kTf32 ? "cuBLAS TF32"
                                                         : "cuBLAS BF16";
    auto launch = [&](const float* a, const float* b, float* c, int m, int n, int k) {
      const void *pa = a, *pb = b;
      __nv_bfloat16 *a16 = nullptr, *b16 = nullptr;
      if (mode == cuda::CublasMode::kBf16) {
        cudaMalloc(&a16, size_t(m) * k * sizeof(__nv_bfloat16));
        cudaMalloc(&b16, size_t(k) * n * sizeof(__nv_bfloat16));
        cuda::to_bf16(a, a16, int64_t(m) * k, nullptr);
        cuda::to_bf16(b, b16, int64_t(k) * n, nullptr);
        pa = a16, pb = b16;
      }
      if (cuda::cublas_gemm(handle, mode, pa, pb, c, m, n, k) != CUBLAS_STATUS_SUCCESS) {
        std::printf("FAIL %s: cuBLAS refused the arguments (%dx%dx%d)\n", name, m, n, k);
        ++failures;
      }
      cudaFree(a16);
      cudaFree(b16);
    };
    for (const Case& c : cases)
      if (c.s.k > 0) check(name, launch, c.s, 0, c.vector, cuda::input_roundoff(mode));
  }
  std::printf("%d of %d runs within the error bound\n", runs - failures, runs);
  return failures ? 1 : 0;
}
