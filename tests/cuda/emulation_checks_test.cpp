// Checks that only the CPU emulation of CUDA can make (they look inside the emulated
// libraries); every test skips on a real GPU and without one.
#include <gtest/gtest.h>


#include "common/test_util.h"
#include "freight/freight.h"

#ifdef FREIGHT_CUDA_EMULATION
#include <cublas_v2.h>  // the emulated cuBLAS (tests/cuda/emulation/include)
#endif

namespace freight::test {
namespace {

const Device kGpu = Device::cuda(0);

// cublasSetStream resets a handle's workspace to cuBLAS's default pool, which cuBLAS then
// allocates behind the caching allocator's back (and inside a graph capture, invalidating it).
// Every GEMM of the engine must run in the workspace bound when the device was set up.
TEST(EmulatedCublas, GemmsRunInFreightsWorkspace) {
#ifndef FREIGHT_CUDA_EMULATION
  GTEST_SKIP() << "looks inside the emulated cuBLAS";
#else
  FREIGHT_SKIP_WITHOUT_CUDA();
  Generator gen(3);
  Tensor a = Tensor::normal({7, 5}, 0, 1, DType::F32, kGpu, &gen);
  Tensor b = Tensor::normal({5, 3}, 0, 1, DType::F32, kGpu, &gen);
  Tensor a64 = Tensor::normal({4, 6, 5}, 0, 1, DType::F64, kGpu, &gen);
  Tensor b64 = Tensor::normal({4, 5, 2}, 0, 1, DType::F64, kGpu, &gen);
  for (int i = 0; i < 3; ++i) {
    Tensor c = matmul(a, b);
    Tensor c64 = matmul(a64, b64);
    (void)c.to_float_vector();
    (void)c64.to_double_vector();
  }
  // Process-wide: the default pool is allocated once per handle and stream, so a GEMM of an
  // earlier test would have counted too.
  EXPECT_EQ(emu::g_cublas_default_workspaces.load(), 0)
      << "a GEMM ran without Freight's workspace: cuBLAS allocated its default pool";
#endif
}

}  // namespace
}  // namespace freight::test
