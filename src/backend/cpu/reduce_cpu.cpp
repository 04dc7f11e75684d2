// CPU reductions over the middle axis of [outer, reduced, inner].
#include <limits>

#include "backend/cpu/dispatch.h"
#include "backend/cpu/parallel.h"
#include "ops/kernels/argmax_rule.h"
#include "ops/kernels/reduce.h"

namespace freight::cpu {
namespace {

template <class T>
void sum_axis_typed(const T* x, int64_t outer, int64_t reduced, int64_t inner, T* out) {
  if (inner == 1) {
    // Row sums: contiguous runs, summed in SIMD lanes (a form of pairwise summation that keeps
    // float32 error growth near √n rather than n).
    parallel_for(outer, std::max<int64_t>(1, elementwise_grain() / reduced),
                 [&](int64_t o0, int64_t o1) {
                   for (int64_t o = o0; o < o1; ++o) {
                     const T* row = x + o * reduced;
                     T acc = 0;
#pragma omp simd reduction(+ : acc)
                     for (int64_t r = 0; r < reduced; ++r) acc += row[r];
                     out[o] = acc;
                   }
                 });
    return;
  }
  // Column sums: accumulate whole rows of `inner` elements (vectorised along inner).
  auto block = [&](int64_t o, int64_t i0, int64_t i1) {
    T* dst = out + o * inner;
    const T* src = x + o * reduced * inner;
    for (int64_t i = i0; i < i1; ++i) dst[i] = src[i];
    for (int64_t r = 1; r < reduced; ++r) {
      const T* row = src + r * inner;
#pragma omp simd
      for (int64_t i = i0; i < i1; ++i) dst[i] += row[i];
    }
  };
  if (outer >= 2 * omp_get_max_threads() || inner < 256) {
    parallel_for(outer, std::max<int64_t>(1, elementwise_grain() / (reduced * inner)),
                 [&](int64_t o0, int64_t o1) {
                   for (int64_t o = o0; o < o1; ++o) block(o, 0, inner);
                 });
  } else {
    for (int64_t o = 0; o < outer; ++o)
      parallel_for(inner, std::max<int64_t>(64, elementwise_grain() / reduced),
                   [&](int64_t i0, int64_t i1) { block(o, i0, i1); });
  }
}

void sum_axis_cpu(const Tensor& x, int64_t outer, int64_t reduced, int64_t inner, Tensor& out) {
  dispatch_floating(x.dtype(), "sum_axis", [&](auto tag) {
    using T = decltype(tag);
    sum_axis_typed(static_cast<const T*>(x.data_ptr()), outer, reduced, inner,
                   static_cast<T*>(out.data_ptr()));
  });
}

void argmax_axis_cpu(const Tensor& x, int64_t outer, int64_t reduced, int64_t inner, Tensor& out) {
  dispatch_all(x.dtype(), "argmax_axis", [&](auto tag) {
    using T = decltype(tag);
    const T* p = static_cast<const T*>(x.data_ptr());
    int64_t* o = out.data<int64_t>();
    parallel_for(outer * inner, std::max<int64_t>(1, elementwise_grain() / reduced),
                 [&](int64_t b, int64_t e) {
                   for (int64_t k = b; k < e; ++k) {
                     int64_t oi = k / inner, ii = k % inner;
                     const T* base = p + oi * reduced * inner + ii;
                     int64_t best = 0;
                     T bv = base[0];
                     for (int64_t r = 1; r < reduced; ++r) {
                       T v = base[r * inner];
                       if (argmax_replaces(v, bv)) bv = v, best = r;
                     }
                     o[k] = best;
                   }
                 });
  });
}

}  // namespace

FREIGHT_REGISTER_KERNEL(kernels::sum_axis, CPU, sum_axis_cpu);
FREIGHT_REGISTER_KERNEL(kernels::argmax_axis, CPU, argmax_axis_cpu);

}  // namespace freight::cpu
