// CPU kernel of the step counters (ops/kernels/counters.h).
#include <fmt/format.h>

#include "ops/kernels/counters.h"

namespace freight::cpu {
namespace {

void count_up_cpu(Tensor& counter, int64_t amount) {
  FREIGHT_CHECK(
      counter.dtype() == DType::I64 && counter.is_contiguous(),
      fmt::format("count_up (cpu): the counter must be a contiguous int64 tensor, got {} {}",
                  dtype_name(counter.dtype()), shape_str(counter.shape())));
  int64_t* c = counter.data<int64_t>();
  for (int64_t i = 0; i < counter.numel(); ++i) c[i] += amount;
}

}  // namespace

FREIGHT_REGISTER_KERNEL(kernels::count_up, CPU, count_up_cpu);

}  // namespace freight::cpu
