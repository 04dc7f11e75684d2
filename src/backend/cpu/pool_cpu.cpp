// CPU kernels of 2-D pooling: threads over planes (N·C). The 2x2 stride-2 unpadded case (LeNet,
// the MNIST CNNs) has its own loop over pairs of rows; 3x3 stride-2 windows padded by 1 have an
// AVX-512 or AVX2 kernel of their own for floats (max_pool_3x3_s2.h); other max windows read each
// row through its stride phases, padded with −∞; 3x3 stride-2 averages sum a zero-padded copy of
// the plane; the remaining averages clip each window to the plane.
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "backend/cpu/dispatch.h"
#include "backend/cpu/max_pool_3x3_s2.h"
#include "backend/cpu/parallel.h"
#include "backend/cpu/unary_rules.h"
#include "ops/kernels/pool.h"

namespace freight::cpu {
namespace {

// 2x2 windows with stride 2 and no padding (LeNet, the MNIST CNNs) have loops of their own.
inline bool is_2x2_s2(const Pool2dGeometry& g) {
  return g.kh == 2 && g.kw == 2 && g.sh == 2 && g.sw == 2 && g.ph == 0 && g.pw == 0;
}

// Planes per thread chunk: enough elements to be worth a thread.
int64_t plane_grain(const Pool2dGeometry& g) {
  return std::max<int64_t>(1, elementwise_grain() / std::max<int64_t>(1, g.h * g.w));
}

// Rows [r0, r1) and columns [c0, c1) of window (i, j), clipped to the plane.
struct Window {
  int64_t r0, r1, c0, c1;
};
inline Window window(const Pool2dGeometry& g, int64_t i, int64_t j) {
  int64_t r = i * g.sh - g.ph, c = j * g.sw - g.pw;
  return {std::max<int64_t>(r, 0), std::min(r + g.kh, g.h), std::max<int64_t>(c, 0),
          std::min(c + g.kw, g.w)};
}

// ---------------------------------------------------------------- max
// PyTorch's rule: a later element replaces the best one when it is larger or NaN (so NaN
// wins, and among equal maxima the first stays).
template <class T>
inline bool replaces(T v, T best) {
  return v > best || std::isnan(v);
}

// c ? a : b by masking bits: GCC turns a ternary in these loops into a branch, which
// mispredicts on about every other element of a ReLU's output.
template <class T>
inline T select(bool c, T a, T b) {
  using Bits = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
  const Bits m = Bits(0) - Bits(c);
  return std::bit_cast<T>(Bits((std::bit_cast<Bits>(a) & m) | (std::bit_cast<Bits>(b) & ~m)));
}

// The running maximum `best` and its index `at` after element v at index i, by replaces' rule,
// without a branch.
template <class T>
inline void keep_max(T v, int32_t i, T& best, int32_t& at) {
  const bool take = replaces(v, best);
  at = select(take, i, at), best = select(take, v, best);
}

// With RELU the values are read through relu (relu_value: a NaN stays NaN and wins the window)
// and a window whose maximum stops relu's gradient (relu_passes: not positive, not NaN) gets
// index −1: max_pool2d(relu(x)) in one pass, the ReLU's mask folded into the indices.
template <bool RELU, class T>
inline T read(T v) {
  if constexpr (RELU)
    return select(v < T(0), T(0), v);
  else
    return v;
}

// The general max pooling reads each input row through its stride phases: phase p holds columns
// p, p + sw, ..., so the column j·sw + off of output j is element j + ⌊off/sw⌋ of phase off mod sw,
// consecutive for consecutive j, and the loops over outputs are unit-stride. Each phase sits
// between runs of −∞ (which never win a maximum) wide enough that every window column can be
// read for every output, in the plane or not: the loops run over all outputs, whole vectors.
struct PhaseLayout {
  int64_t len;     // columns of the widest phase, ⌈w / sw⌉
  int64_t front;   // −∞ before each phase
  int64_t stride;  // from one phase to the next: front + len + the −∞ after
};
inline PhaseLayout phase_layout(const Pool2dGeometry& g) {
  PhaseLayout l;
  l.len = (g.w + g.sw - 1) / g.sw;
  l.front = (g.pw + g.sw - 1) / g.sw;  // the most negative ⌊off/sw⌋, negated
  const int64_t last = (g.ow - 1) + (g.kw - 1 - g.pw) / g.sw;  // the furthest element read
  l.stride = l.front + std::max(l.len, last + 1);
  return l;
}
// The buffers, one set per thread, kept between planes and calls.
template <class T>
struct PoolScratch {
  std::vector<T> phases, hv, neg_inf;  // neg_inf: a row of −∞, for window rows off the plane
  std::vector<int32_t> hc, first_col;
  std::vector<int64_t> tap_start;  // per window column: where output 0's element is
};
template <class T>
PoolScratch<T>& pool_scratch() {
  thread_local PoolScratch<T> s;
  return s;
}
// Sizes the thread's buffers for planes of geometry g, fills the −∞ around the phases (the rows
// only ever write the columns they have), each output's first column in the plane (its index
// when nothing beats −∞) and each window column's start. Once per thread and call.
template <class T>
PoolScratch<T>& prepared_scratch(const Pool2dGeometry& g) {
  PoolScratch<T>& s = pool_scratch<T>();
  const PhaseLayout l = phase_layout(g);
  s.phases.assign(size_t(g.sw * l.stride), -std::numeric_limits<T>::infinity());
  s.hv.resize(size_t(g.h * g.ow));
  s.neg_inf.assign(size_t(g.ow), -std::numeric_limits<T>::infinity());
  s.hc.resize(size_t(g.h * g.ow));
  s.first_col.resize(size_t(g.ow));
  for (int64_t j = 0; j < g.ow; ++j)
    s.first_col[size_t(j)] = int32_t(std::max<int64_t>(j * g.sw - g.pw, 0));
  s.tap_start.resize(size_t(g.kw));
  for (int64_t dc = 0; dc < g.kw; ++dc) {
    const int64_t off = dc - g.pw;
    const int64_t ph = ((off % g.sw) + g.sw) % g.sw, q = (off - ph) / g.sw;
    s.tap_start[size_t(dc)] = ph * l.stride + l.front + q;
  }
  return s;
}
// Phase p of the row: phases[p·stride + front + k] = f(row[p + k·sw]); stride 1 and 2 get loops
// of constant stride, which vectorise.
template <class T, class F>
void split_phases(const T* row, const Pool2dGeometry& g, const PhaseLayout& l, T* phases, F f) {
  T* to = phases + l.front;
  if (g.sw == 1) {
    for (int64_t k = 0; k < g.w; ++k) to[k] = f(row[k]);
  } else if (g.sw == 2) {
    for (int64_t k = 0; 2 * k < g.w; ++k) to[k] = f(row[2 * k]);
    for (int64_t k = 0; 2 * k + 1 < g.w; ++k) to[l.stride + k] = f(row[2 * k + 1]);
  } else {
    for (int64_t p = 0; p < g.sw; ++p)
      for (int64_t k = 0; p + k * g.sw < g.w; ++k) to[p * l.stride + k] = f(row[p + k * g.sw]);
  }
}

// Whether planes of geometry g take a path of their own that needs no PoolScratch.
template <class T>
bool own_path(const Pool2dGeometry& g) {
#if defined(FREIGHT_MAX_POOL_3X3_S2)
  if (std::is_same_v<T, float> && is_3x3_s2_p1(g)) return true;
#endif
  return is_2x2_s2(g);
}

template <bool RELU, class T>
void max_forward_plane(const T* x, const Pool2dGeometry& g, PoolScratch<T>* scratch, T* y,
                       int32_t* idx) {
#if defined(FREIGHT_MAX_POOL_3X3_S2)
  if constexpr (std::is_same_v<T, float>) {
    if (is_3x3_s2_p1(g)) {
      max_forward_3x3_s2_p1<RELU>(x, g, y, idx);
      return;
    }
  }
#endif
  if (is_2x2_s2(g)) {
    for (int64_t i = 0; i < g.oh; ++i) {
      const T* a = x + 2 * i * g.w;
      const T* b = a + g.w;
      T* yr = y + i * g.ow;
      int32_t* ir = idx + i * g.ow;
      const int32_t base = int32_t(2 * i * g.w);
      for (int64_t j = 0; j < g.ow; ++j) {
        if constexpr (RELU) {
          // Selects, not branches, so the loop vectorises: whether one relu'd value beats
          // another is a coin toss that a branch would mispredict.
          const T v0 = read<RELU>(a[2 * j]), v1 = read<RELU>(a[2 * j + 1]);
          const T v2 = read<RELU>(b[2 * j]), v3 = read<RELU>(b[2 * j + 1]);
          T best = v0;
          int32_t k = 0;
          const bool t1 = replaces(v1, best);
          k = t1 ? 1 : k, best = t1 ? v1 : best;
          const bool t2 = replaces(v2, best);
          k = t2 ? 2 : k, best = t2 ? v2 : best;
          const bool t3 = replaces(v3, best);
          k = t3 ? 3 : k, best = t3 ? v3 : best;
          yr[j] = best;
          ir[j] =
              relu_passes(best) ? base + int32_t(2 * j) + (k & 1) + (k >> 1) * int32_t(g.w) : -1;
        } else {
          T best = a[2 * j];
          int32_t k = 0;  // 0, 1: top row; 2, 3: bottom row
          if (replaces(a[2 * j + 1], best)) best = a[2 * j + 1], k = 1;
          if (replaces(b[2 * j], best)) best = b[2 * j], k = 2;
          if (replaces(b[2 * j + 1], best)) best = b[2 * j + 1], k = 3;
          yr[j] = best;
          ir[j] = base + int32_t(2 * j) + (k & 1) + (k >> 1) * int32_t(g.w);
        }
      }
    }
    return;
  }
  PoolScratch<T>& s = *scratch;
  // Any other window, in two passes that keep the inner loops unit-stride (so they vectorise):
  //  1. each input row's maxima over the windows' columns, hv[r][j] with the column hc[r][j],
  //     read through the row's stride phases (split_phases);
  //  2. each output row's maximum over its window's rows of hv.
  // Each pass keeps the first maximum (and the last NaN) in its order, so the result is the
  // window's row-major rule: the topmost row holding the maximum, its leftmost column.
  const PhaseLayout l = phase_layout(g);
  const int32_t sw = int32_t(g.sw);
  for (int64_t r = 0; r < g.h; ++r) {
    T* phases = s.phases.data();
    split_phases(x + r * g.w, g, l, phases, [](T v) { return read<RELU>(v); });
    T* hr = s.hv.data() + r * g.ow;
    int32_t* cr = s.hc.data() + r * g.ow;
    if (g.kw == 3) {  // the usual width: the three columns in one pass over the outputs
      const T *s0 = phases + s.tap_start[0], *s1 = phases + s.tap_start[1],
              *s2 = phases + s.tap_start[2];
      const int32_t o = int32_t(-g.pw);
      const int32_t* first = s.first_col.data();
      for (int64_t j = 0; j < g.ow; ++j) {
        T best = -std::numeric_limits<T>::infinity();
        int32_t at = first[j];
        const int32_t c = int32_t(j) * sw + o;
        keep_max(s0[j], c, best, at);
        keep_max(s1[j], c + 1, best, at);
        keep_max(s2[j], c + 2, best, at);
        hr[j] = best, cr[j] = at;
      }
      continue;
    }
    std::fill(hr, hr + g.ow, -std::numeric_limits<T>::infinity());
    std::copy(s.first_col.begin(), s.first_col.end(), cr);
    for (int64_t dc = 0; dc < g.kw; ++dc) {
      const T* src = phases + s.tap_start[size_t(dc)];
      const int32_t off = int32_t(dc - g.pw);
      for (int64_t j = 0; j < g.ow; ++j) {
        keep_max(src[j], int32_t(j) * sw + off, hr[j], cr[j]);
      }
    }
  }
  for (int64_t i = 0; i < g.oh; ++i) {
    T* yr = y + i * g.ow;
    int32_t* ir = idx + i * g.ow;
    const int64_t r0 = std::max<int64_t>(i * g.sh - g.ph, 0);
    if (g.kh == 3) {  // the three rows in one pass; a row outside the plane reads −∞
      const T* rows[3];
      const int32_t* cols[3];
      int32_t starts[3];
      for (int64_t dr = 0; dr < 3; ++dr) {
        const int64_t r = i * g.sh - g.ph + dr;
        const bool in = r >= 0 && r < g.h;
        rows[dr] = in ? s.hv.data() + r * g.ow : s.neg_inf.data();
        cols[dr] = in ? s.hc.data() + r * g.ow : s.first_col.data();
        starts[dr] = int32_t((in ? r : 0) * g.w);
      }
      const int32_t* first = s.first_col.data();
      const int32_t top = int32_t(r0 * g.w);
      for (int64_t j = 0; j < g.ow; ++j) {
        T best = -std::numeric_limits<T>::infinity();
        int32_t at = top + first[j];
        keep_max(rows[0][j], starts[0] + cols[0][j], best, at);
        keep_max(rows[1][j], starts[1] + cols[1][j], best, at);
        keep_max(rows[2][j], starts[2] + cols[2][j], best, at);
        if constexpr (RELU) at = relu_passes(best) ? at : -1;
        yr[j] = best, ir[j] = at;
      }
      continue;
    }
    for (int64_t j = 0; j < g.ow; ++j) {
      yr[j] = -std::numeric_limits<T>::infinity();
      ir[j] = int32_t(r0 * g.w + std::max<int64_t>(j * g.sw - g.pw, 0));
    }
    for (int64_t dr = 0; dr < g.kh; ++dr) {
      const int64_t r = i * g.sh - g.ph + dr;
      if (r < 0 || r >= g.h) continue;
      const T* hr = s.hv.data() + r * g.ow;
      const int32_t* cr = s.hc.data() + r * g.ow;
      const int32_t row = int32_t(r * g.w);
      for (int64_t j = 0; j < g.ow; ++j) {
        keep_max(hr[j], row + cr[j], yr[j], ir[j]);
      }
    }
    if constexpr (RELU)
      for (int64_t j = 0; j < g.ow; ++j) ir[j] = relu_passes(yr[j]) ? ir[j] : -1;
  }
}

// relu(max_pool2d(x)) from one plane's max_pool2d: y = relu_value(y) (a NaN maximum stays NaN,
// as relu's own kernel keeps it) and index −1 wherever relu's gradient stops. The plane's
// outputs were just written, so this reads them from the cache.
template <class T>
void relu_after_plane(int64_t n, T* y, int32_t* idx) {
  for (int64_t k = 0; k < n; ++k) {
    idx[k] = relu_passes(y[k]) ? idx[k] : -1;
    y[k] = relu_value(y[k]);
  }
}

void max_forward_cpu(const Tensor& x, const Pool2dGeometry& g, PoolRelu relu, Tensor& y,
                     Tensor& indices) {
  dispatch_floating(x.dtype(), "max_pool2d_forward", [&](auto tag) {
    using T = decltype(tag);
    const T* px = static_cast<const T*>(x.data_ptr());
    T* py = static_cast<T*>(y.data_ptr());
    int32_t* pi = indices.data<int32_t>();
    const int64_t in = g.h * g.w, out = g.oh * g.ow;
    parallel_for(g.planes, plane_grain(g), [&](int64_t b, int64_t e) {
      PoolScratch<T>* s = own_path<T>(g) ? nullptr : &prepared_scratch<T>(g);
      for (int64_t p = b; p < e; ++p) {
        if (relu == PoolRelu::Input) {
          max_forward_plane<true>(px + p * in, g, s, py + p * out, pi + p * out);
          continue;
        }
        max_forward_plane<false>(px + p * in, g, s, py + p * out, pi + p * out);
        if (relu == PoolRelu::Output) relu_after_plane(out, py + p * out, pi + p * out);
      }
    });
  });
}

void max_backward_cpu(const Tensor& gy, const Tensor& indices, const Pool2dGeometry& g,
                      Tensor& gx) {
  dispatch_floating(gy.dtype(), "max_pool2d_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* pg = static_cast<const T*>(gy.data_ptr());
    const int32_t* pi = indices.data<int32_t>();
    T* px = static_cast<T*>(gx.data_ptr());
    const int64_t in = g.h * g.w, out = g.oh * g.ow;
    // Each plane's gradients land in its own input plane: no two threads touch one.
    parallel_for(g.planes, plane_grain(g), [&](int64_t b, int64_t e) {
      for (int64_t p = b; p < e; ++p) {
        T* dst = px + p * in;
        const T* src = pg + p * out;
        const int32_t* id = pi + p * out;
        std::fill(dst, dst + in, T(0));
        for (int64_t k = 0; k < out; ++k)
          if (id[k] >= 0) dst[id[k]] += src[k];
      }
    });
  });
}

// ---------------------------------------------------------------- average

// 3x3 windows with stride 2 and padding 0 or 1 (AlexNet's and most CNNs' overlapping pooling):
// the plane is copied into a zero-padded one (count_include_pad: the padding adds nothing), so
// no window needs clipping, and summed in two passes whose loops run over a whole row of outputs:
// each padded row's sums over the windows' three columns, then each window's three rows. A
// small plane's windows then cost a few vector operations each instead of nine clipped scalar
// loads.
inline bool is_3x3_s2(const Pool2dGeometry& g) {
  return g.kh == 3 && g.kw == 3 && g.sh == 2 && g.sw == 2 && g.ph == g.pw && g.ph <= 1;
}
template <class T>
struct AvgScratch {
  std::vector<T> padded, rows;
};
template <class T>
AvgScratch<T>& avg_scratch(const Pool2dGeometry& g) {
  thread_local AvgScratch<T> s;
  const int64_t hp = g.h + 2 * g.ph, wp = g.w + 2 * g.pw;
  s.padded.assign(size_t(hp * wp), T(0));  // the border stays 0; each plane fills the inside
  s.rows.resize(size_t(hp * g.ow));
  return s;
}
// With RELU the values are read through relu (read<RELU>, as the max pooling reads them).
template <bool RELU, class T>
void avg_forward_3x3_s2(const T* x, const Pool2dGeometry& g, AvgScratch<T>& s, T scale, T* y) {
  const int64_t hp = g.h + 2 * g.ph, wp = g.w + 2 * g.pw, ow = g.ow;
  T* pad = s.padded.data();
  for (int64_t r = 0; r < g.h; ++r) {
    const T* src = x + r * g.w;
    T* dst = pad + (r + g.ph) * wp + g.pw;
#pragma omp simd
    for (int64_t c = 0; c < g.w; ++c) dst[c] = read<RELU>(src[c]);
  }
  for (int64_t r = 0; r < hp; ++r) {
    const T* a = pad + r * wp;
    T* out = s.rows.data() + r * ow;
#pragma omp simd
    for (int64_t j = 0; j < ow; ++j) out[j] = a[2 * j] + a[2 * j + 1] + a[2 * j + 2];
  }
  for (int64_t i = 0; i < g.oh; ++i) {
    const T* r0 = s.rows.data() + 2 * i * ow;
    T* yr = y + i * ow;
#pragma omp simd
    for (int64_t j = 0; j < ow; ++j) yr[j] = (r0[j] + r0[ow + j] + r0[2 * ow + j]) * scale;
  }
}
// The transpose: each window's gradient (times the scale) to its three padded rows, then each
// padded row's sums to the columns: column 2m gets the windows m and m − 1, column 2m + 1
// window m. The inside of the padded plane is the input's gradient.
template <class T>
void avg_backward_3x3_s2(const T* gy, const Pool2dGeometry& g, AvgScratch<T>& s, T scale, T* gx) {
  const int64_t wp = g.w + 2 * g.pw, ow = g.ow;
  std::fill(s.rows.begin(), s.rows.end(), T(0));
  for (int64_t i = 0; i < g.oh; ++i) {
    const T* gr = gy + i * ow;
    for (int64_t dr = 0; dr < 3; ++dr) {
      T* out = s.rows.data() + (2 * i + dr) * ow;
#pragma omp simd
      for (int64_t j = 0; j < ow; ++j) out[j] += gr[j] * scale;
    }
  }
  T* pad = s.padded.data();
  for (int64_t r = g.ph; r < g.ph + g.h; ++r) {
    const T* t = s.rows.data() + r * ow;
    T* a = pad + r * wp;
    // Columns 0 .. 2·ow of the padded row are the windows' (the last window ends at 2·ow);
    // any column beyond is in no window.
    a[0] = t[0];
#pragma omp simd
    for (int64_t m = 1; m < ow; ++m) a[2 * m] = t[m] + t[m - 1];
#pragma omp simd
    for (int64_t m = 0; m < ow; ++m) a[2 * m + 1] = t[m];
    a[2 * ow] = t[ow - 1];
    for (int64_t c = 2 * ow + 1; c < wp; ++c) a[c] = T(0);
    std::copy(a + g.pw, a + g.pw + g.w, gx + (r - g.ph) * g.w);
  }
}

// One plane's average pooling, its values read through relu with RELU.
template <bool RELU, class T>
void avg_forward_plane(const T* xp, const Pool2dGeometry& g, AvgScratch<T>* s, T scale, T* yp) {
  if (s) {
    avg_forward_3x3_s2<RELU>(xp, g, *s, scale, yp);
    return;
  }
  if (is_2x2_s2(g)) {
    for (int64_t i = 0; i < g.oh; ++i) {
      const T* a = xp + 2 * i * g.w;
      const T* b = a + g.w;
      T* yr = yp + i * g.ow;
#pragma omp simd
      for (int64_t j = 0; j < g.ow; ++j)
        yr[j] = (read<RELU>(a[2 * j]) + read<RELU>(a[2 * j + 1]) + read<RELU>(b[2 * j]) +
                 read<RELU>(b[2 * j + 1])) *
                scale;
    }
    return;
  }
  for (int64_t i = 0; i < g.oh; ++i)
    for (int64_t j = 0; j < g.ow; ++j) {
      const Window win = window(g, i, j);
      T sum = 0;
      for (int64_t r = win.r0; r < win.r1; ++r)
        for (int64_t c = win.c0; c < win.c1; ++c) sum += read<RELU>(xp[r * g.w + c]);
      yp[i * g.ow + j] = sum * scale;
    }
}

void avg_forward_cpu(const Tensor& x, const Pool2dGeometry& g, bool relu, Tensor& y) {
  dispatch_floating(x.dtype(), "avg_pool2d_forward", [&](auto tag) {
    using T = decltype(tag);
    const T* px = static_cast<const T*>(x.data_ptr());
    T* py = static_cast<T*>(y.data_ptr());
    const int64_t in = g.h * g.w, out = g.oh * g.ow;
    const T scale = T(1) / T(g.kh * g.kw);  // count_include_pad: always the full window
    parallel_for(g.planes, plane_grain(g), [&](int64_t b, int64_t e) {
      AvgScratch<T>* s = is_3x3_s2(g) ? &avg_scratch<T>(g) : nullptr;
      for (int64_t p = b; p < e; ++p) {
        if (relu)
          avg_forward_plane<true>(px + p * in, g, s, scale, py + p * out);
        else
          avg_forward_plane<false>(px + p * in, g, s, scale, py + p * out);
      }
    });
  });
}

// One plane's input gradient, without relu's selection.
template <class T>
void avg_backward_plane(const T* gp, const Pool2dGeometry& g, AvgScratch<T>* s, T scale, T* xp) {
  if (s) {
    avg_backward_3x3_s2(gp, g, *s, scale, xp);
    return;
  }
  if (is_2x2_s2(g) && g.h % 2 == 0 && g.w % 2 == 0) {  // windows tile the plane
    for (int64_t i = 0; i < g.oh; ++i) {
      T* a = xp + 2 * i * g.w;
      T* b = a + g.w;
      const T* gr = gp + i * g.ow;
#pragma omp simd
      for (int64_t j = 0; j < g.ow; ++j) {
        const T v = gr[j] * scale;
        a[2 * j] = v, a[2 * j + 1] = v, b[2 * j] = v, b[2 * j + 1] = v;
      }
    }
    return;
  }
  std::fill(xp, xp + g.h * g.w, T(0));
  for (int64_t i = 0; i < g.oh; ++i)
    for (int64_t j = 0; j < g.ow; ++j) {
      const Window win = window(g, i, j);
      const T v = gp[i * g.ow + j] * scale;
      for (int64_t r = win.r0; r < win.r1; ++r)
        for (int64_t c = win.c0; c < win.c1; ++c) xp[r * g.w + c] += v;
    }
}

// relu's backward on a plane of the input gradient just written (still in cache): an element
// whose input stops relu's gradient (relu_passes on the input: the output has its sign, NaN
// included) gets 0, as relu's own kernel selects.
template <class T>
void select_relu(const T* x, int64_t n, T* gx) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) gx[i] = relu_passes(x[i]) ? gx[i] : T(0);
}

void avg_backward_cpu(const Tensor& gy, const Pool2dGeometry& g, const Tensor& relu_input,
                      Tensor& gx) {
  dispatch_floating(gy.dtype(), "avg_pool2d_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* pg = static_cast<const T*>(gy.data_ptr());
    T* px = static_cast<T*>(gx.data_ptr());
    FREIGHT_CHECK(
        !relu_input.defined() || (relu_input.numel() == gx.numel() &&
                                  relu_input.dtype() == gx.dtype() && relu_input.is_contiguous()),
        "avg_pool2d_backward (cpu): relu's input must be packed like the gradient");
    const T* pr = relu_input.defined() ? static_cast<const T*>(relu_input.data_ptr()) : nullptr;
    const int64_t in = g.h * g.w, out = g.oh * g.ow;
    const T scale = T(1) / T(g.kh * g.kw);
    parallel_for(g.planes, plane_grain(g), [&](int64_t b, int64_t e) {
      AvgScratch<T>* s = is_3x3_s2(g) ? &avg_scratch<T>(g) : nullptr;
      for (int64_t p = b; p < e; ++p) {
        T* xp = px + p * in;
        avg_backward_plane(pg + p * out, g, s, scale, xp);
        if (pr) select_relu(pr + p * in, in, xp);
      }
    });
  });
}

}  // namespace

FREIGHT_REGISTER_KERNEL(kernels::max_pool2d_forward, CPU, max_forward_cpu);
FREIGHT_REGISTER_KERNEL(kernels::max_pool2d_backward, CPU, max_backward_cpu);
FREIGHT_REGISTER_KERNEL(kernels::avg_pool2d_forward, CPU, avg_forward_cpu);
FREIGHT_REGISTER_KERNEL(kernels::avg_pool2d_backward, CPU, avg_backward_cpu);

}  // namespace freight::cpu
