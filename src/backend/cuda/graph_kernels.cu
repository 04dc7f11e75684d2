// Small kernels of the graph machinery (cuda_backend.cpp): writing a value that a captured
// graph reads at replay time. A kernel rather than a memcpy from host memory, so the value
// travels in the launch's arguments and no host buffer has to outlive the call.
#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_context.h"

namespace freight::cuda {
namespace {
__global__ void write_u64_kernel(uint64_t* dst, uint64_t value) {
  if (blockIdx.x == 0 && threadIdx.x == 0) *dst = value;
}
}  // namespace

void write_u64_async(uint64_t* dst, uint64_t value, cudaStream_t s) {
  write_u64_kernel<<<1, 32, 0, s>>>(dst, value);
  FREIGHT_CUDA_CHECK_LAUNCH();
}

}  // namespace freight::cuda
