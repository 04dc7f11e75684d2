// Counters of the cuDNN convolution plan cache (conv.cu), for tests: a repeated shape must reuse
// its plan and its algorithm choices. Internal to the CUDA backend.
#pragma once
#include <cstdint>

namespace freight::cuda {

struct ConvPlanCacheStats {
  int64_t plans = 0;    // geometries (with dtype, device and mode) that have descriptors
  int64_t choices = 0;  // algorithm choices made so far (at most three per plan)
  // The algorithm most recently chosen for each pass (forward, backward data, backward filter:
  // cudnnConvolution*Algo_t values), -1 before the first choice.
  int last_choice[3] = {-1, -1, -1};
};
ConvPlanCacheStats conv_plan_cache_stats();

}  // namespace freight::cuda
