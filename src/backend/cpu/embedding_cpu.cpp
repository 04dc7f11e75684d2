// CPU kernels of the embedding family. The forward copies rows; the backward gives each thread
// a range of table rows, which it zeroes and then fills from every lookup that lands in it, so
// threads never write the same row and the sums are in lookup order (deterministic).
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "backend/cpu/dispatch.h"
#include "backend/cpu/parallel.h"
#include "freight/error.h"
#include "ops/kernels/embedding.h"

namespace freight::cpu {
namespace {

void embedding_forward_cpu(const Tensor& indices, const Tensor& weight, Tensor& out) {
  const int64_t* idx = indices.data<int64_t>();
  int64_t n = indices.numel(), num = weight.size(0), dim = weight.size(1);
  for (int64_t i = 0; i < n; ++i) {
    if (idx[i] < 0 || idx[i] >= num) [[unlikely]]
      throw Error(
          fmt::format("embedding: index {} at position {} is out of range for a table of {} rows "
                      "(expected 0 <= index < {})",
                      idx[i], i, num, num));
  }
  if (dim == 0) return;
  dispatch_floating(weight.dtype(), "embedding_forward", [&](auto tag) {
    using T = decltype(tag);
    const T* w = static_cast<const T*>(weight.data_ptr());
    T* o = static_cast<T*>(out.data_ptr());
    parallel_for(n, std::max<int64_t>(1, elementwise_grain() / dim), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i)
        std::memcpy(o + i * dim, w + idx[i] * dim, size_t(dim) * sizeof(T));
    });
  });
}

void embedding_backward_cpu(const Tensor& indices, const Tensor& grad_out, Tensor& grad_weight) {
  const int64_t* idx = indices.data<int64_t>();
  int64_t n = indices.numel(), num = grad_weight.size(0), dim = grad_weight.size(1);
  dispatch_floating(grad_weight.dtype(), "embedding_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* g = static_cast<const T*>(grad_out.data_ptr());
    T* gw = static_cast<T*>(grad_weight.data_ptr());
    // Table rows [r0, r1): zero them, then add every lookup that falls inside.
    auto rows = [&](int64_t r0, int64_t r1) {
      std::memset(gw + r0 * dim, 0, size_t((r1 - r0) * dim) * sizeof(T));
      for (int64_t i = 0; i < n; ++i) {
        int64_t r = idx[i];
        if (r < r0 || r >= r1) continue;
        T* dst = gw + r * dim;
        const T* src = g + i * dim;
#pragma omp simd
        for (int64_t j = 0; j < dim; ++j) dst[j] += src[j];
      }
    };
    if ((n + num) * dim < elementwise_grain())
      rows(0, num);
    else
      parallel_for(num, 1, rows);
  });
}

}  // namespace

FREIGHT_REGISTER_KERNEL(kernels::embedding_forward, CPU, embedding_forward_cpu);
FREIGHT_REGISTER_KERNEL(kernels::embedding_backward, CPU, embedding_backward_cpu);

}  // namespace freight::cpu
