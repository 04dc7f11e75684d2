// CPU kernels of the softmax family over [outer, n, inner].
//
// Last dimension (inner == 1): long rows run three SIMD passes each (max; exponentials and
// their sum; normalisation). Short rows (n < kShortRow, e.g. 10 classes) would spend their time
// in vector prologues and scalar tails, so they are processed a block of rows at a time: per-row
// max and shift, then one SIMD exponential over the whole contiguous block, then per-row sums.
// Other dimensions work on tiles of up to kTile columns of the inner axis, so the loops still
// run along contiguous memory and the per-column maxima and sums live on the stack.
#include <algorithm>
#include <cmath>

#include "backend/cpu/dispatch.h"
#include "backend/cpu/parallel.h"
#include "backend/cpu/vec_math.h"
#include "ops/kernels/softmax.h"

namespace freight::cpu {
namespace {

constexpr int64_t kTile = 64;          // inner-axis columns handled together when inner > 1
constexpr int64_t kShortRow = 64;      // rows shorter than this take the blocked path
constexpr int64_t kBlockElems = 2048;  // elements per block of short rows (fits in L1)

// exp that vectorises for float (vec_math.h); libm for double.
// Runs rows(o0, o1) over ranges of slices of an inner == 1 layout, or tile(o, i0, i1) for each
// block of inner columns, split over threads once the work exceeds the elementwise grain.
template <class RowsFn, class TileFn>
void for_each_slice(int64_t outer, int64_t n, int64_t inner, RowsFn&& rows, TileFn&& tile) {
  if (inner == 1) {
    parallel_for(outer, std::max<int64_t>(1, elementwise_grain() / n), rows);
    return;
  }
  int64_t tiles_per = (inner + kTile - 1) / kTile;
  int64_t width = std::min(inner, kTile);
  parallel_for(outer * tiles_per, std::max<int64_t>(1, elementwise_grain() / (n * width)),
               [&](int64_t b, int64_t e) {
                 for (int64_t t = b; t < e; ++t) {
                   int64_t o = t / tiles_per, i0 = (t % tiles_per) * kTile;
                   tile(o, i0, std::min(inner, i0 + kTile));
                 }
               });
}

template <class T>
void softmax_forward_typed(const T* x, int64_t outer, int64_t n, int64_t inner, bool log, T* y) {
  auto row = [&](int64_t o) {
    const T* xr = x + o * n;
    T* yr = y + o * n;
    const T m = row_max(xr, n);
    if (!log) {
      softmax_row(xr, n, m, yr);
    } else {
      // (x − m) − log s rather than x − (m + log s): the first difference is exact near the max.
      T ls = std::log(sum_exp_shifted(xr, n, m));
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) yr[i] = (xr[i] - m) - ls;
    }
  };
  auto tile = [&](int64_t o, int64_t i0, int64_t i1) {
    const T* xb = x + o * n * inner + i0;
    T* yb = y + o * n * inner + i0;
    int64_t w = i1 - i0;
    T m[kTile], s[kTile];
    for (int64_t i = 0; i < w; ++i) m[i] = xb[i], s[i] = 0;
    for (int64_t r = 1; r < n; ++r) {
      const T* xr = xb + r * inner;
#pragma omp simd
      for (int64_t i = 0; i < w; ++i) m[i] = xr[i] > m[i] ? xr[i] : m[i];
    }
    for (int64_t r = 0; r < n; ++r) {
      const T* xr = xb + r * inner;
      T* yr = yb + r * inner;
      if (!log) {
#pragma omp simd
        for (int64_t i = 0; i < w; ++i) {
          T e = exp_t(xr[i] - m[i]);
          yr[i] = e;
          s[i] += e;
        }
      } else {
#pragma omp simd
        for (int64_t i = 0; i < w; ++i) s[i] += exp_t(xr[i] - m[i]);
      }
    }
    if (!log) {
      for (int64_t i = 0; i < w; ++i) s[i] = T(1) / s[i];
      for (int64_t r = 0; r < n; ++r) {
        T* yr = yb + r * inner;
#pragma omp simd
        for (int64_t i = 0; i < w; ++i) yr[i] *= s[i];
      }
    } else {
      for (int64_t i = 0; i < w; ++i) s[i] = std::log(s[i]);
      for (int64_t r = 0; r < n; ++r) {
        const T* xr = xb + r * inner;
        T* yr = yb + r * inner;
#pragma omp simd
        for (int64_t i = 0; i < w; ++i) yr[i] = (xr[i] - m[i]) - s[i];
      }
    }
  };
  // Short rows, a block at a time: shift by the row max, one long SIMD exponential over the
  // block, then per-row normalisation (log_softmax keeps the shifted inputs in y and the
  // exponentials in a stack buffer).
  auto rows = [&](int64_t o0, int64_t o1) {
    if (n >= kShortRow) {
      for (int64_t o = o0; o < o1; ++o) row(o);
      return;
    }
    T scratch[kBlockElems];
    int64_t per = kBlockElems / n;
    for (int64_t b = o0; b < o1; b += per) {
      int64_t e = std::min(o1, b + per);
      for (int64_t o = b; o < e; ++o) {
        const T* xr = x + o * n;
        T* yr = y + o * n;
        T m = xr[0];
        for (int64_t i = 1; i < n; ++i) m = xr[i] > m ? xr[i] : m;
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) yr[i] = xr[i] - m;
      }
      T* yb = y + b * n;
      T* eb = log ? scratch : yb;
      int64_t len = (e - b) * n;
#pragma omp simd
      for (int64_t i = 0; i < len; ++i) eb[i] = exp_t(yb[i]);
      for (int64_t o = b; o < e; ++o) {
        const T* er = eb + (o - b) * n;
        T* yr = y + o * n;
        T s = 0;
        for (int64_t i = 0; i < n; ++i) s += er[i];
        if (!log) {
          T inv = T(1) / s;
#pragma omp simd
          for (int64_t i = 0; i < n; ++i) yr[i] *= inv;
        } else {
          T ls = std::log(s);
#pragma omp simd
          for (int64_t i = 0; i < n; ++i) yr[i] -= ls;
        }
      }
    }
  };
  for_each_slice(outer, n, inner, rows, tile);
}

template <class T>
void softmax_backward_typed(const T* y, const T* gy, int64_t outer, int64_t n, int64_t inner,
                            bool log, T* gx) {
  auto row = [&](int64_t o) {
    const T* yr = y + o * n;
    const T* gr = gy + o * n;
    T* xr = gx + o * n;
    T s = 0;
    if (!log) {  // gx = y ⊙ (gy − Σ gy⊙y)
#pragma omp simd reduction(+ : s)
      for (int64_t i = 0; i < n; ++i) s += gr[i] * yr[i];
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) xr[i] = yr[i] * (gr[i] - s);
    } else {  // gx = gy − exp(y) · Σ gy
#pragma omp simd reduction(+ : s)
      for (int64_t i = 0; i < n; ++i) s += gr[i];
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) xr[i] = gr[i] - exp_t(yr[i]) * s;
    }
  };
  auto tile = [&](int64_t o, int64_t i0, int64_t i1) {
    int64_t base = o * n * inner + i0, w = i1 - i0;
    T s[kTile];
    for (int64_t i = 0; i < w; ++i) s[i] = 0;
    for (int64_t r = 0; r < n; ++r) {
      const T* yr = y + base + r * inner;
      const T* gr = gy + base + r * inner;
      if (!log) {
#pragma omp simd
        for (int64_t i = 0; i < w; ++i) s[i] += gr[i] * yr[i];
      } else {
#pragma omp simd
        for (int64_t i = 0; i < w; ++i) s[i] += gr[i];
      }
    }
    for (int64_t r = 0; r < n; ++r) {
      const T* yr = y + base + r * inner;
      const T* gr = gy + base + r * inner;
      T* xr = gx + base + r * inner;
      if (!log) {
#pragma omp simd
        for (int64_t i = 0; i < w; ++i) xr[i] = yr[i] * (gr[i] - s[i]);
      } else {
#pragma omp simd
        for (int64_t i = 0; i < w; ++i) xr[i] = gr[i] - exp_t(yr[i]) * s[i];
      }
    }
  };
  // Short rows: plain loops for the per-row sums (no SIMD reduction set-up), and for
  // log_softmax one long SIMD exponential over a block of rows.
  auto rows = [&](int64_t o0, int64_t o1) {
    if (n >= kShortRow) {
      for (int64_t o = o0; o < o1; ++o) row(o);
      return;
    }
    int64_t per = kBlockElems / n;
    for (int64_t b = o0; b < o1; b += per) {
      int64_t e = std::min(o1, b + per);
      if (log) {
        const T* yb = y + b * n;
        T* xb = gx + b * n;
        int64_t len = (e - b) * n;
#pragma omp simd
        for (int64_t i = 0; i < len; ++i) xb[i] = exp_t(yb[i]);
      }
      for (int64_t o = b; o < e; ++o) {
        const T* yr = y + o * n;
        const T* gr = gy + o * n;
        T* xr = gx + o * n;
        T s = 0;
        if (!log) {
          for (int64_t i = 0; i < n; ++i) s += gr[i] * yr[i];
#pragma omp simd
          for (int64_t i = 0; i < n; ++i) xr[i] = yr[i] * (gr[i] - s);
        } else {
          for (int64_t i = 0; i < n; ++i) s += gr[i];
#pragma omp simd
          for (int64_t i = 0; i < n; ++i) xr[i] = gr[i] - xr[i] * s;
        }
      }
    }
  };
  for_each_slice(outer, n, inner, rows, tile);
}

void softmax_forward_cpu(const Tensor& x, int64_t outer, int64_t n, int64_t inner, bool log,
                         Tensor& y) {
  dispatch_floating(x.dtype(), log ? "log_softmax_forward" : "softmax_forward", [&](auto tag) {
    using T = decltype(tag);
    softmax_forward_typed(static_cast<const T*>(x.data_ptr()), outer, n, inner, log,
                          static_cast<T*>(y.data_ptr()));
  });
}

void softmax_backward_cpu(const Tensor& y, const Tensor& gy, int64_t outer, int64_t n,
                          int64_t inner, bool log, Tensor& gx) {
  dispatch_floating(y.dtype(), log ? "log_softmax_backward" : "softmax_backward", [&](auto tag) {
    using T = decltype(tag);
    softmax_backward_typed(static_cast<const T*>(y.data_ptr()),
                           static_cast<const T*>(gy.data_ptr()), outer, n, inner, log,
                           static_cast<T*>(gx.data_ptr()));
  });
}

}  // namespace

FREIGHT_REGISTER_KERNEL(kernels::softmax_forward, CPU, softmax_forward_cpu);
FREIGHT_REGISTER_KERNEL(kernels::softmax_backward, CPU, softmax_backward_cpu);

}  // namespace freight::cpu
