// Internal helpers of the CPU convolution shared by its engines (conv_cpu.cpp,
// conv_tile_engines.h): rows of unrolled patches (im2col) and their adjoint (col2im) over ranges of
// output pixels, and how the work is split over threads.
#pragma once
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "backend/cpu/conv_tiles.h"
#include "backend/cpu/unary_rules.h"
#include "freight/parallel_thresholds.h"
#include "freight/tensor.h"
#include "ops/kernels/conv.h"

namespace freight::cpu::conv_detail {

template <class T>
T* ptr(const Tensor& t) {
  return static_cast<T*>(t.data_ptr());
}
inline int64_t round_up(int64_t x, int64_t m) {
  return (x + m - 1) / m * m;
}
template <class T>
DType dtype_of() {
  return std::is_same_v<T, float> ? DType::F32 : DType::F64;
}

// p[i] = relu(p[i]) (relu_value): a fused ReLU on output a thread has just written, while it is
// in its cache.
template <class T>
inline void relu_in_place(T* p, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) p[i] = relu_value(p[i]);
}

#if defined(__AVX512F__)
using conv_tiles::copy_n;
#else
template <class T>
inline void copy_n(const T* src, int64_t n, T* dst) {
  std::memcpy(dst, src, size_t(n) * sizeof(T));
}
#endif

// ================================================================ patch rows
// For kernel column q, the output columns j whose input column j·sw − pw + q·dw lies inside
// [0, w) are j0 <= j < j1; the others read padding.
struct ColRange {
  int64_t j0, j1;
};
inline ColRange valid_cols(const Conv2dGeometry& g, int64_t q) {
  int64_t off = q * g.dw - g.pw;  // input column read by output column 0
  int64_t j0 = off >= 0 ? 0 : (-off + g.sw - 1) / g.sw;
  int64_t j1 = off > g.w - 1 ? 0 : (g.w - 1 - off) / g.sw + 1;
  j0 = std::min(j0, g.ow);
  j1 = std::clamp(j1, j0, g.ow);
  return {j0, j1};
}

// Row k = (ci, p, q) of col for the output pixels [pix0, pix1) of one image, pixel = i·ow + j:
//   out[pix − pix0] = x[ci][i·sh − ph + p·dh][j·sw − pw + q·dw], 0 outside the input.
// `xc` is the channel plane x[ci].
template <class T>
void im2col_row(const T* xc, const Conv2dGeometry& g, int64_t p, int64_t q, int64_t pix0,
                int64_t pix1, T* out) {
  const auto [j0, j1] = valid_cols(g, q);
  const int64_t off_w = q * g.dw - g.pw;
  int64_t i = pix0 / g.ow, j = pix0 % g.ow;
  for (int64_t left = pix1 - pix0; left > 0; ++i, j = 0) {
    const int64_t je = std::min(g.ow, j + left);  // this output row contributes [j, je)
    const int64_t ih = i * g.sh - g.ph + p * g.dh;
    T* o = out - j;  // o[j'] is output column j' of this row
    if (ih < 0 || ih >= g.h) {
      for (int64_t c = j; c < je; ++c) o[c] = T(0);
    } else {
      const T* src = xc + ih * g.w + off_w;  // src[c·sw] is read by output column c
      const int64_t a = std::clamp(j0, j, je), b = std::clamp(j1, a, je);
      for (int64_t c = j; c < a; ++c) o[c] = T(0);
      if (g.sw == 1) {
#pragma omp simd
        for (int64_t c = a; c < b; ++c) o[c] = src[c];
      } else {
        const int64_t s = g.sw;
        for (int64_t c = a; c < b; ++c) o[c] = src[c * s];
      }
      for (int64_t c = b; c < je; ++c) o[c] = T(0);
    }
    out += je - j;
    left -= je - j;
  }
}

// The adjoint of im2col_row: dxc[ci-plane pixel read by pixel pix] += row[pix − pix0].
template <class T>
void col2im_row(const T* row, const Conv2dGeometry& g, int64_t p, int64_t q, int64_t pix0,
                int64_t pix1, T* dxc) {
  const auto [j0, j1] = valid_cols(g, q);
  const int64_t off_w = q * g.dw - g.pw;
  int64_t i = pix0 / g.ow, j = pix0 % g.ow;
  for (int64_t left = pix1 - pix0; left > 0; ++i, j = 0) {
    const int64_t je = std::min(g.ow, j + left);
    const int64_t ih = i * g.sh - g.ph + p * g.dh;
    if (ih >= 0 && ih < g.h) {
      const T* in = row - j;
      T* dst = dxc + ih * g.w + off_w;
      const int64_t a = std::clamp(j0, j, je), b = std::clamp(j1, a, je);
      if (g.sw == 1) {
#pragma omp simd
        for (int64_t c = a; c < b; ++c) dst[c] += in[c];
      } else {
        const int64_t s = g.sw;
        for (int64_t c = a; c < b; ++c) dst[c * s] += in[c];
      }
    }
    row += je - j;
    left -= je - j;
  }
}

// Calls fn(image, pix0, pix1, pos) for the pieces of the global pixel range [c0, c1) (pixels
// numbered image-major over the batch, P per image) that fall in each image; pos is the piece's
// position in the range.
template <class Fn>
void for_image_pieces(int64_t c0, int64_t c1, int64_t P, Fn&& fn) {
  for (int64_t c = c0; c < c1;) {
    int64_t img = c / P, p0 = c % P, p1 = std::min(P, p0 + (c1 - c));
    fn(img, p0, p1, c - c0);
    c += p1 - p0;
  }
}

// Row k of col over global pixels [c0, c1) into out (c1 − c0 values).
template <class T>
void patch_row(const T* x, const Conv2dGeometry& g, int64_t k, int64_t c0, int64_t c1, T* out) {
  const int64_t q = k % g.kw, p = (k / g.kw) % g.kh, ci = k / (g.kw * g.kh);
  const int64_t P = g.oh * g.ow;
  for_image_pieces(c0, c1, P, [&](int64_t img, int64_t p0, int64_t p1, int64_t pos) {
    im2col_row(x + (img * g.c + ci) * g.h * g.w, g, p, q, p0, p1, out + pos);
  });
}

// Row o of dY over global pixels [c0, c1) into out.
template <class T>
void grad_row(const T* gy, const Conv2dGeometry& g, int64_t o, int64_t c0, int64_t c1, T* out) {
  const int64_t P = g.oh * g.ow;
  for_image_pieces(c0, c1, P, [&](int64_t img, int64_t p0, int64_t p1, int64_t pos) {
    copy_n(gy + (img * g.o + o) * P + p0, p1 - p0, out + pos);
  });
}

// col2im of row k of dcol (global pixels [c0, c1)) into dx.
template <class T>
void scatter_row(const T* row, const Conv2dGeometry& g, int64_t k, int64_t c0, int64_t c1, T* dx) {
  const int64_t q = k % g.kw, p = (k / g.kw) % g.kh, ci = k / (g.kw * g.kh);
  const int64_t P = g.oh * g.ow;
  for_image_pieces(c0, c1, P, [&](int64_t img, int64_t p0, int64_t p1, int64_t pos) {
    col2im_row(row + pos, g, p, q, p0, p1, dx + (img * g.c + ci) * g.h * g.w);
  });
}

// ================================================================ work split
// Bytes of unrolled operands one thread keeps per chunk: half of a 2 MiB L2.
constexpr int64_t kChunkBytes = int64_t(1) << 20;

// Threads worth using for `macs` multiply-adds split into at most `pieces` independent parts
// (images, or units of pixels). A parallel region costs a few microseconds, and each thread
// pulls its share of the operands over from the calling core's cache: a thread must get at
// least the machine's measured multiply-adds per thread (freight/parallel_thresholds.h), and a
// thread without a piece would only add partial sums to zero and add up.
inline int threads_for(double macs, int64_t pieces) {
  if (omp_in_parallel()) return 1;
  const double per_thread = std::max(1.0, parallel_thresholds().conv_macs_per_thread);
  const double worth = std::floor(macs / per_thread);
  const int64_t t = std::min<int64_t>(omp_get_max_threads(), std::max<int64_t>(1, pieces));
  return int(std::clamp<double>(worth, 1.0, double(t)));
}

// Pixels per chunk: `rows` unrolled rows of `elem` bytes fit in the budget; a multiple of
// `align`, at least `align`, and no more than the thread's range needs.
inline int64_t chunk_pixels(int64_t rows, size_t elem, int64_t align, int64_t range) {
  int64_t l = kChunkBytes / std::max<int64_t>(1, rows * int64_t(elem));
  l = std::max(align, l / align * align);
  return std::min(l, round_up(std::max<int64_t>(range, 1), align));
}

// Runs fn(thread, begin, end) on `nt` threads over [0, n) split into contiguous ranges whose
// boundaries are multiples of `unit` (except the end). On one thread the library calls inside
// fn (OpenBLAS) run on one thread too, as they do on each thread of a parallel region: the pass
// was judged not worth splitting, and a library that split it its own way would give other bits
// than the same calls split by pieces (OpenBLAS cuts a product's columns between its threads,
// and its result for a column depends on where the cut falls).
template <class Fn>
void split_threads(int nt, int64_t n, int64_t unit, Fn&& fn) {
  if (nt <= 1) {
    const int saved = omp_in_parallel() ? 0 : omp_get_max_threads();
    if (saved > 1) omp_set_num_threads(1);
    struct Restore {
      int n;
      ~Restore() {
        if (n > 1) omp_set_num_threads(n);
      }
    } restore{saved};
    fn(0, int64_t(0), n);
    return;
  }
  const int64_t units = (n + unit - 1) / unit;
#pragma omp parallel num_threads(nt)
  {
    const int64_t t = omp_get_thread_num(), k = omp_get_num_threads();
    const int64_t b = std::min(n, units * t / k * unit),
                  e = std::min(n, units * (t + 1) / k * unit);
    fn(int(t), b, e);
  }
}

// Runs fn(thread, begin, end) on `nt` threads over [0, n) in pieces of `grain` items handed out
// as threads come free. On a shared machine one thread may lose its core for a while; a static
// split would make the whole step wait for it.
template <class Fn>
void dynamic_threads(int nt, int64_t n, int64_t grain, Fn&& fn) {
  if (nt <= 1) {
    for (int64_t b = 0; b < n; b += grain) fn(0, b, std::min(n, b + grain));
    return;
  }
  std::atomic<int64_t> next{0};
#pragma omp parallel num_threads(nt)
  {
    const int t = omp_get_thread_num();
    for (int64_t b; (b = next.fetch_add(grain, std::memory_order_relaxed)) < n;)
      fn(t, b, std::min(n, b + grain));
  }
}

// Runs fn(thread, begin, end) on `nt` threads over [0, n) in pieces of at most `grain` items,
// each thread taking a fixed contiguous run of whole pieces. For passes whose threads sum into
// private accumulators (the weight gradients): which items a thread sums must not depend on
// timing, or the summation order, and so the rounding, would change from run to run and the
// same seed would not give the same weights.
template <class Fn>
void static_grains(int nt, int64_t n, int64_t grain, Fn&& fn) {
  split_threads(nt, n, grain, [&](int t, int64_t b, int64_t e) {
    for (int64_t i = b; i < e; i += grain) fn(t, i, std::min(e, i + grain));
  });
}

}  // namespace freight::cpu::conv_detail
