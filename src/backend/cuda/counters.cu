// CUDA kernel of the step counters (ops/kernels/counters.h): a thread per element, in stream
// order with the step that counts.
#include <string>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_context.h"
#include "ops/kernels/counters.h"

namespace freight::cuda {
namespace {

__global__ void count_up_kernel(int64_t* counter, int64_t n, int64_t amount) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    counter[i] += amount;
}

void count_up_cuda(Tensor& counter, int64_t amount) {
  FREIGHT_CHECK(
      counter.dtype() == DType::I64 && counter.is_contiguous(),
      std::string("count_up (cuda): the counter must be a contiguous int64 tensor, got ") +
          dtype_name(counter.dtype()) + " " + shape_str(counter.shape()));
  if (counter.numel() == 0) return;
  int dev = counter.device().index;
  set_device(dev);
  count_up_kernel<<<blocks_for(counter.numel()), 256, 0, stream(dev)>>>(
      static_cast<int64_t*>(counter.data_ptr()), counter.numel(), amount);
  FREIGHT_CUDA_CHECK_LAUNCH();
}

}  // namespace

FREIGHT_REGISTER_KERNEL(kernels::count_up, CUDA, count_up_cuda);

}  // namespace freight::cuda
