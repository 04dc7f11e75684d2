// The CUDA backend is a library of its own (libfreight_cuda.so) that libfreight loads on the first
// question about CUDA (src/core/backend.cpp): a process that only works on the CPU never maps it,
// nor cuBLAS, cuBLASLt, cuDNN and NCCL, whose start-up would cost it a tenth of a second or more.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "core/backend.h"
#include "freight/freight.h"
#include "ops/kernels/reduce.h"

namespace freight {
namespace {

bool mapped(const std::string& library) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line))
    if (line.find(library) != std::string::npos) return true;
  return false;
}

// Exit codes of the checks below (a fresh process: earlier tests may have loaded the backend).
enum : int {
  kOk = 0,
  kLoadedByCpuWork = 2,
  kLoadedWithoutDriver = 3,
  kNotLoaded = 4,
  kNoCuda = 5,
  kSlotsEmpty = 6
};

int cpu_work_then_cuda_questions() {
  Tensor a = Tensor::uniform({16, 16}, -1, 1);
  a.set_requires_grad(true);
  Tensor loss = sum(relu(matmul(a, a)));
  loss.backward();
  if (mapped("libfreight_cuda") || mapped("libcublas") || mapped("libcudnn"))
    return kLoadedByCpuWork;
  // With no NVIDIA driver, asking for a GPU is answered without the backend.
  std::string why;
  const bool gpu = cuda_available(&why);
  if (!gpu && !cuda_driver_missing().empty() && mapped("libfreight_cuda"))
    return kLoadedWithoutDriver;
  // Asking for the backend itself loads it, with its CUDA libraries.
  if (!has_backend(DeviceType::CUDA)) return kNoCuda;
  if (!mapped("libfreight_cuda") || !mapped("libcublasLt")) return kNotLoaded;
  // Its registrars filled the engine's kernel entries (GNU unique symbols: one slot per process).
  return kernels::argmax_axis.has(DeviceType::CUDA) ? kOk : kSlotsEmpty;
}

TEST(CudaModule, LoadsOnlyWhenCudaIsAskedAbout) {
#if !FREIGHT_WITH_CUDA
  GTEST_SKIP() << "a CPU-only build: no CUDA backend";
#else
  if (!mapped("libfreight.so")) GTEST_SKIP() << "the engine is not a shared library here";
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // re-runs this test in a fresh process
  EXPECT_EXIT(std::exit(cpu_work_then_cuda_questions()), testing::ExitedWithCode(kOk), "")
      << "exit codes: 2 loaded by CPU work, 3 loaded to learn there is no driver, 4 not loaded "
         "when asked for, 6 its kernels not in the engine's entries, 5 no CUDA backend: "
      << missing_backend_reason(DeviceType::CUDA);
#endif
}

}  // namespace
}  // namespace freight
