// CUDA kernel of the training metrics (ops/kernels/metrics.h). One launch per batch: a thread
// per row (256 per block, grid-stride) scans its row by the CPU's argmax rule
// (ops/kernels/argmax_rule.h), and counts a hit when it is the label; each thread adds its count to
// sums[1] with one atomicAdd of a whole number (exact in a double, so the order of the additions
// does not matter), and thread 0 of block 0 adds loss · weight to sums[0] (one addition per launch,
// in stream order: deterministic).
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_context.h"
#include "backend/cuda/dispatch.h"
#include "ops/kernels/argmax_rule.h"
#include "ops/kernels/metrics.h"

namespace freight::cuda {
namespace {

template <class T>
__global__ void accumulate_metrics_kernel(const T* x, const int64_t* labels, int64_t rows,
                                          int64_t c, const T* loss, double weight, double* sums) {
  int64_t hits = 0;
  for (int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; r < rows;
       r += int64_t(gridDim.x) * blockDim.x) {
    const T* row = x + r * c;
    int64_t best = 0;
    T bv = row[0];
    for (int64_t j = 1; j < c; ++j) {
      T v = row[j];
      if (argmax_replaces(v, bv)) bv = v, best = j;
    }
    hits += best == labels[r];
  }
  if (hits) atomicAdd(&sums[1], double(hits));
  if (blockIdx.x == 0 && threadIdx.x == 0) sums[0] += double(loss[0]) * weight;
}

void accumulate_metrics_cuda(const Tensor& output, const Tensor& labels, const Tensor& loss,
                             double weight, Tensor& sums) {
  FREIGHT_CHECK(output.dim() == 2 && output.is_contiguous() && labels.is_contiguous() &&
                    labels.dtype() == DType::I64 && labels.numel() == output.size(0) &&
                    loss.numel() == 1 && loss.dtype() == output.dtype() &&
                    sums.dtype() == DType::F64 && sums.numel() == 2 && sums.is_contiguous(),
                "accumulate_metrics (cuda): expects output [R, C], int64 labels [R], a scalar "
                "loss of the output's dtype and float64 sums [2]");
  int64_t rows = output.size(0), c = output.size(1);
  int dev = sums.device().index;
  set_device(dev);
  dispatch_floating(output.dtype(), "accumulate_metrics", [&](auto tag) {
    using T = decltype(tag);
    // rows == 0 or c == 0: one thread still adds the loss; no row is scanned.
    int64_t scanned = c > 0 ? rows : 0;
    accumulate_metrics_kernel<T><<<blocks_for(scanned), 256, 0, stream(dev)>>>(
        static_cast<const T*>(output.data_ptr()), static_cast<const int64_t*>(labels.data_ptr()),
        scanned, c, static_cast<const T*>(loss.data_ptr()), weight,
        static_cast<double*>(sums.data_ptr()));
    FREIGHT_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace

FREIGHT_REGISTER_KERNEL(kernels::accumulate_metrics, CUDA, accumulate_metrics_cuda);

}  // namespace freight::cuda
