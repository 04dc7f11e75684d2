// CPU reductions over the middle axis of [outer, reduced, inner].
#include <algorithm>
#include <limits>
#include <vector>

#include "backend/cpu/dispatch.h"
#include "backend/cpu/parallel.h"
#include "ops/kernels/argmax_rule.h"
#include "ops/kernels/reduce.h"

namespace freight::cpu {
namespace {

// Terms a SIMD pass sums before its partial goes into a double: 256 along a row (16 per lane of
// AVX-512), 256 rows down a column. The error then stays near that of one such pass for any
// length, where a single pass of lanes grew with n / lanes (a million float32 values of 0.1
// summed to 99910; PyTorch's cascade sum gives 100000). A build that does not vectorise (the
// sanitizers') sums a chunk in one running float: 256 terms keep that within 1e-5 too (1024 gave
// 1e-5 on the tenths). Rows and columns up to 256 are summed exactly as by one pass.
constexpr int64_t kRowChunk = 256;
constexpr int64_t kColumnChunk = 256;

template <class T>
void sum_axis_typed(const T* x, int64_t outer, int64_t reduced, int64_t inner, T* out) {
  if (inner == 1) {
    // Row sums: contiguous runs, summed in SIMD lanes (a form of pairwise summation), a chunk at
    // a time.
    parallel_for(outer, std::max<int64_t>(1, elementwise_grain() / reduced),
                 [&](int64_t o0, int64_t o1) {
                   for (int64_t o = o0; o < o1; ++o) {
                     const T* row = x + o * reduced;
                     double total = 0;
                     for (int64_t c = 0; c < reduced; c += kRowChunk) {
                       const int64_t e = std::min(reduced, c + kRowChunk);
                       T acc = 0;
#pragma omp simd reduction(+ : acc)
                       for (int64_t r = c; r < e; ++r) acc += row[r];
                       total += double(acc);
                     }
                     out[o] = T(total);
                   }
                 });
    return;
  }
  // Column sums: accumulate whole rows of `inner` elements (vectorised along inner), a chunk of
  // rows at a time into dst, whose partials a double per column gathers.
  auto block = [&](int64_t o, int64_t i0, int64_t i1) {
    T* dst = out + o * inner;
    const T* src = x + o * reduced * inner;
    std::vector<double> total(size_t(reduced > kColumnChunk ? i1 - i0 : 0), 0.0);
    for (int64_t c = 0; c < reduced; c += kColumnChunk) {
      const int64_t e = std::min(reduced, c + kColumnChunk);
      for (int64_t i = i0; i < i1; ++i) dst[i] = src[c * inner + i];
      for (int64_t r = c + 1; r < e; ++r) {
        const T* row = src + r * inner;
#pragma omp simd
        for (int64_t i = i0; i < i1; ++i) dst[i] += row[i];
      }
      if (!total.empty())
        for (int64_t i = i0; i < i1; ++i) total[size_t(i - i0)] += double(dst[i]);
    }
    if (!total.empty())
      for (int64_t i = i0; i < i1; ++i) dst[i] = T(total[size_t(i - i0)]);
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
