// CUDA kernels of the embedding family: indices int64 [n] (flat), weight [num, dim], out [n, dim].
//
// Forward: one thread per output element (i, j), 256 per block, grid-stride: out[i, j] =
//   weight[idx[i], j]; consecutive threads copy consecutive columns of a row (coalesced). An
//   index outside [0, num) is recorded as a deferred error (deferred_error.h) and its output
//   row is filled with NaN; it is never used as an address. With dim = 0 there is nothing to
//   copy, but the indices are still checked (one thread per index), as on the CPU.
// Backward, deterministic and free of atomics, in O(n·log²n + n·dim + num·dim) work:
//   1. one key per lookup, idx[i]·2³² + i (an index outside [0, num), already reported by the
//      forward, gets num·2³² + i: it sorts after every valid one and its gradient goes nowhere),
//      padded with INT64_MAX to a power of two;
//   2. a bitonic sort of the keys, one launch per (stage, step), one thread per element pair:
//      lookups of one table row end up adjacent, in lookup order (the key's low half);
//   3. the gradient zeroed, then one thread per (sorted position p, column j): where p starts a
//      run of one row r, the thread sums grad_out[i, j] over the run in lookup order and writes
//      grad_weight[r, j]; threads elsewhere in a run return at once. Consecutive threads take
//      consecutive columns (coalesced). Each element has one writer and the CPU's summation
//      order (lookup order, from zero), so the result is bit-for-bit reproducible.
// The previous form (every weight element walked all n lookups) cost num·dim·n compares:
// seconds per step at a 50k vocabulary.
#include <climits>
#include <cmath>
#include <string>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_context.h"
#include "backend/cuda/deferred_error.h"
#include "backend/cuda/dispatch.h"
#include "ops/kernels/embedding.h"

namespace freight::cuda {
namespace {

template <class T>
__global__ void embedding_forward_kernel(const int64_t* idx, const T* w, int64_t n, int64_t num,
                                         int64_t dim, T* out, DeferredErrorSlot err) {
  int64_t total = n * dim;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total;
       e += int64_t(gridDim.x) * blockDim.x) {
    int64_t i = e / dim, j = e % dim;
    int64_t r = idx[i];
    if (r < 0 || r >= num) {
      if (j == 0) report_deferred_error(err, DeferredKind::EmbeddingIndex, r, i, num);
      out[e] = T(NAN);
    } else {
      out[e] = w[r * dim + j];
    }
  }
}

__global__ void check_indices_kernel(const int64_t* idx, int64_t n, int64_t num,
                                     DeferredErrorSlot err) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t r = idx[i];
    if (r < 0 || r >= num) report_deferred_error(err, DeferredKind::EmbeddingIndex, r, i, num);
  }
}

void embedding_forward_cuda(const Tensor& indices, const Tensor& weight, Tensor& out) {
  FREIGHT_CHECK(indices.dtype() == DType::I64 && indices.is_contiguous() && weight.dim() == 2 &&
                    weight.is_contiguous() && out.is_contiguous(),
                "embedding_forward (cuda): expects contiguous int64 indices and a contiguous "
                "2-D weight");
  int64_t n = indices.numel(), num = weight.size(0), dim = weight.size(1);
  if (n == 0) return;
  int dev = out.device().index;
  set_device(dev);
  cudaStream_t s = stream(dev);
  const int64_t* idx = static_cast<const int64_t*>(indices.data_ptr());
  DeferredErrorSlot err = deferred_error_slot(dev);
  if (dim == 0) {
    check_indices_kernel<<<blocks_for(n), 256, 0, s>>>(idx, n, num, err);
    FREIGHT_CUDA_CHECK_LAUNCH();
    return;
  }
  dispatch_floating(weight.dtype(), "embedding_forward", [&](auto tag) {
    using T = decltype(tag);
    embedding_forward_kernel<T>
        <<<blocks_for(n * dim), 256, 0, s>>>(idx, static_cast<const T*>(weight.data_ptr()), n, num,
                                             dim, static_cast<T*>(out.data_ptr()), err);
    FREIGHT_CUDA_CHECK_LAUNCH();
  });
}

__global__ void embedding_keys_kernel(const int64_t* idx, int64_t n, int64_t num, int64_t padded,
                                      int64_t* keys) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < padded;
       e += int64_t(gridDim.x) * blockDim.x) {
    if (e >= n) {
      keys[e] = INT64_MAX;
    } else {
      int64_t r = idx[e];
      keys[e] = ((r >= 0 && r < num ? r : num) << 32) | e;
    }
  }
}

// One compare-exchange step of a bitonic sort of `padded` keys (a power of two): stage size k,
// partner distance j. Element i pairs with i ^ j; blocks of k alternate ascending/descending.
__global__ void bitonic_step_kernel(int64_t* keys, int64_t padded, int64_t k, int64_t j) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < padded;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t l = i ^ j;
    if (l <= i) continue;
    int64_t a = keys[i], b = keys[l];
    bool ascending = (i & k) == 0;
    if (ascending ? a > b : a < b) {
      keys[i] = b;
      keys[l] = a;
    }
  }
}

template <class T>
__global__ void embedding_segment_sum_kernel(const int64_t* keys, const T* g, int64_t n,
                                             int64_t num, int64_t dim, T* gw) {
  int64_t total = n * dim;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total;
       e += int64_t(gridDim.x) * blockDim.x) {
    int64_t p = e / dim, j = e % dim;
    int64_t r = keys[p] >> 32;
    if (r >= num || (p > 0 && (keys[p - 1] >> 32) == r)) continue;  // not the start of a run
    T acc = 0;
    for (int64_t q = p; q < n && (keys[q] >> 32) == r; ++q)
      acc += g[(keys[q] & 0xffffffffLL) * dim + j];  // lookup order, as the CPU
    gw[r * dim + j] = acc;
  }
}

void embedding_backward_cuda(const Tensor& indices, const Tensor& grad_out, Tensor& grad_weight) {
  FREIGHT_CHECK(indices.dtype() == DType::I64 && indices.is_contiguous() &&
                    grad_out.is_contiguous() && grad_weight.dim() == 2 &&
                    grad_weight.is_contiguous(),
                "embedding_backward (cuda): expects contiguous int64 indices, a contiguous "
                "output gradient and a 2-D weight gradient");
  int64_t n = indices.numel(), num = grad_weight.size(0), dim = grad_weight.size(1);
  if (num * dim == 0) return;
  FREIGHT_CHECK(num <= INT32_MAX && n <= INT32_MAX,
                "embedding_backward (cuda): " + std::to_string(n) + " lookups into " +
                    std::to_string(num) + " rows exceed the sort keys' 31-bit halves");
  int dev = grad_weight.device().index;
  set_device(dev);
  cudaStream_t s = stream(dev);
  FREIGHT_CUDA_CHECK(cudaMemsetAsync(grad_weight.data_ptr(), 0, grad_weight.nbytes(), s));
  if (n == 0) return;
  int64_t padded = 1;
  while (padded < n) padded <<= 1;
  Tensor keys_t = Tensor::empty({padded}, DType::I64, grad_weight.device());
  int64_t* keys = static_cast<int64_t*>(keys_t.data_ptr());
  embedding_keys_kernel<<<blocks_for(padded), 256, 0, s>>>(
      static_cast<const int64_t*>(indices.data_ptr()), n, num, padded, keys);
  FREIGHT_CUDA_CHECK_LAUNCH();
  for (int64_t k = 2; k <= padded; k <<= 1)
    for (int64_t j = k >> 1; j > 0; j >>= 1) {
      bitonic_step_kernel<<<blocks_for(padded), 256, 0, s>>>(keys, padded, k, j);
      FREIGHT_CUDA_CHECK_LAUNCH();
    }
  dispatch_floating(grad_weight.dtype(), "embedding_backward", [&](auto tag) {
    using T = decltype(tag);
    embedding_segment_sum_kernel<T>
        <<<blocks_for(n * dim), 256, 0, s>>>(keys, static_cast<const T*>(grad_out.data_ptr()), n,
                                             num, dim, static_cast<T*>(grad_weight.data_ptr()));
    FREIGHT_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace

FREIGHT_REGISTER_KERNEL(kernels::embedding_forward, CUDA, embedding_forward_cuda);
FREIGHT_REGISTER_KERNEL(kernels::embedding_backward, CUDA, embedding_backward_cuda);

}  // namespace freight::cuda
