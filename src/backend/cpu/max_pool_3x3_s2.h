// Max pooling over 3x3 windows with stride 2 and padding 1 (AlexNet's overlapping pooling) on
// float planes with AVX-512 or AVX2, for pool_cpu.cpp. The general path reads each row through
// its stride phases in loops over one row of outputs at a time; on planes as narrow as
// AlexNet-CIFAR's (32 columns, 16 outputs a row) those loops are mostly their own set-up, and the
// pass took about seven times as long as reading its input. Here one vector holds L outputs of a
// row (16 with AVX-512, 8 with AVX2): each window row's three columns 2j − 1, 2j and 2j + 1 are
// the odd and even lanes of two 2L-column spans, loaded masked (a column off the plane reads −∞,
// and never wins), and the nine taps are taken in the window's row-major order by the scalar
// rule of pool_cpu.cpp (a later tap wins when it is larger or NaN; with RELU the in-plane values
// are read through relu first), so outputs and indices are the general path's, bit for bit.
// FREIGHT_MAX_POOL_3X3_S2 is defined where one of the two instruction sets is.
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "ops/kernels/pool.h"

#if defined(__AVX512F__) || defined(__AVX2__)
#define FREIGHT_MAX_POOL_3X3_S2 1

namespace freight::cpu {

inline bool is_3x3_s2_p1(const Pool2dGeometry& g) {
  return g.kh == 3 && g.kw == 3 && g.sh == 2 && g.sw == 2 && g.ph == 1 && g.pw == 1;
}

namespace max_pool_3x3_s2 {

// The lanes [lo, hi) of a vector of L, those a load from `col` finds in a plane of w columns.
struct InPlane {
  int64_t lo, hi;
};
inline InPlane in_plane(int64_t w, int64_t col, int64_t lanes) {
  return {std::clamp<int64_t>(-col, 0, lanes), std::clamp<int64_t>(w - col, 0, lanes)};
}

#if defined(__AVX512F__)
struct Lanes {
  static constexpr int64_t L = 16;
  using F = __m512;
  using I = __m512i;
  using Mask = __mmask16;
  static F neg_inf() { return _mm512_set1_ps(-std::numeric_limits<float>::infinity()); }
  static I splat(int64_t v) { return _mm512_set1_epi32(int32_t(v)); }
  static I add(I a, I b) { return _mm512_add_epi32(a, b); }
  static I even_offsets() {  // 0, 2, 4, ... 2(L − 1)
    return _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  }
  static Mask lanes_below(int64_t n) { return Mask((uint32_t(1) << n) - 1); }
  static Mask lanes_in(InPlane p) {
    return p.hi > p.lo ? Mask(((1u << p.hi) - 1) & ~((1u << p.lo) - 1)) : Mask(0);
  }
  static bool none(Mask m) { return m == 0; }
  static F load(const float* p, Mask in) { return _mm512_mask_loadu_ps(neg_inf(), in, p); }
  static F load_all(const float* p) { return _mm512_loadu_ps(p); }
  // (the maskz form: _mm512_max_ps starts from an undefined vector, which GCC 12 warns of)
  static F relu(F v) { return _mm512_maskz_max_ps(Mask(0xFFFF), _mm512_setzero_ps(), v); }
  static F relu_in(F v, Mask in) {  // max(0, v) keeps a NaN and −0; −∞ off the plane
    return _mm512_mask_max_ps(neg_inf(), in, _mm512_setzero_ps(), v);
  }
  // Lanes 2k and 2k + 1 of the 2L values a | b.
  static F evens(F a, F b) { return _mm512_permutex2var_ps(a, even_offsets(), b); }
  static F odds(F a, F b) {
    return _mm512_permutex2var_ps(a, _mm512_add_epi32(even_offsets(), splat(1)), b);
  }
  static void keep_max(F v, I i, F& best, I& at) {  // where v > best or v is NaN
    Mask take = _mm512_cmp_ps_mask(v, best, _CMP_GT_OQ) | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    best = _mm512_mask_mov_ps(best, take, v);
    at = _mm512_mask_mov_epi32(at, take, i);
  }
  static I set_lane0(I at, int64_t v) { return _mm512_mask_mov_epi32(at, 1, splat(v)); }
  static I no_gradient_where_relu_fails(F best, I at) {  // −1 where best <= 0 (not NaN)
    return _mm512_mask_mov_epi32(splat(-1),
                                 _mm512_cmp_ps_mask(best, _mm512_setzero_ps(), _CMP_NLE_UQ), at);
  }
  static void store(float* y, int32_t* idx, Mask out, F best, I at) {
    _mm512_mask_storeu_ps(y, out, best);
    _mm512_mask_storeu_epi32(idx, out, at);
  }
  static void store_all(float* y, int32_t* idx, F best, I at) {
    _mm512_storeu_ps(y, best);
    _mm512_storeu_si512(idx, at);
  }
};
#else
struct Lanes {
  static constexpr int64_t L = 8;
  using F = __m256;
  using I = __m256i;
  using Mask = __m256i;  // all ones in a lane that is on
  static F neg_inf() { return _mm256_set1_ps(-std::numeric_limits<float>::infinity()); }
  static I splat(int64_t v) { return _mm256_set1_epi32(int32_t(v)); }
  static I add(I a, I b) { return _mm256_add_epi32(a, b); }
  static I even_offsets() { return _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14); }
  static I iota() { return _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7); }
  static Mask lanes_below(int64_t n) { return _mm256_cmpgt_epi32(splat(n), iota()); }
  static Mask lanes_in(InPlane p) {  // lo <= lane < hi
    return _mm256_andnot_si256(_mm256_cmpgt_epi32(splat(p.lo), iota()), lanes_below(p.hi));
  }
  static bool none(Mask m) { return _mm256_testz_si256(m, m); }
  static F load(const float* p, Mask in) {
    return _mm256_blendv_ps(neg_inf(), _mm256_maskload_ps(p, in), _mm256_castsi256_ps(in));
  }
  static F load_all(const float* p) { return _mm256_loadu_ps(p); }
  static F relu(F v) { return _mm256_max_ps(_mm256_setzero_ps(), v); }
  static F relu_in(F v, Mask in) {  // max(0, v) keeps a NaN and −0; −∞ off the plane
    return _mm256_blendv_ps(neg_inf(), _mm256_max_ps(_mm256_setzero_ps(), v),
                            _mm256_castsi256_ps(in));
  }
  // Lanes 2k (or 2k + 1) of the 16 values a | b: shuffle_ps picks them within each 128-bit half
  // (a's then b's), and the 64-bit quarters are put back in order 0, 2, 1, 3.
  static F evens(F a, F b) {
    return _mm256_castpd_ps(_mm256_permute4x64_pd(
        _mm256_castps_pd(_mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0))), 0xD8));
  }
  static F odds(F a, F b) {
    return _mm256_castpd_ps(_mm256_permute4x64_pd(
        _mm256_castps_pd(_mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1))), 0xD8));
  }
  static void keep_max(F v, I i, F& best, I& at) {  // where v > best or v is NaN
    F take = _mm256_or_ps(_mm256_cmp_ps(v, best, _CMP_GT_OQ), _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    best = _mm256_blendv_ps(best, v, take);
    at = _mm256_castps_si256(
        _mm256_blendv_ps(_mm256_castsi256_ps(at), _mm256_castsi256_ps(i), take));
  }
  static I set_lane0(I at, int64_t v) { return _mm256_blend_epi32(at, splat(v), 1); }
  static I no_gradient_where_relu_fails(F best, I at) {  // −1 where best <= 0 (not NaN)
    F pass = _mm256_cmp_ps(best, _mm256_setzero_ps(), _CMP_NLE_UQ);
    return _mm256_castps_si256(
        _mm256_blendv_ps(_mm256_castsi256_ps(splat(-1)), _mm256_castsi256_ps(at), pass));
  }
  static void store(float* y, int32_t* idx, Mask out, F best, I at) {
    _mm256_maskstore_ps(y, out, best);
    _mm256_maskstore_epi32(idx, out, at);
  }
  static void store_all(float* y, int32_t* idx, F best, I at) {
    _mm256_storeu_ps(y, best);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(idx), at);
  }
};
#endif

// The three taps of one window row for L outputs from column 2·j0 on: columns 2j − 1, 2j and
// 2j + 1 of the row, −∞ off the plane.
struct Taps {
  Lanes::F left, centre, right;
};

// L columns from `col` (which may start before the plane or run past it), −∞ off the plane,
// read through relu with RELU.
// Masked loads and stores cost more than plain ones (much more on AMD's AVX2 cores): the
// columns inside the plane, most of them, take plain ones.
template <bool RELU>
inline Lanes::F load_columns(const float* row, int64_t w, int64_t col) {
  const InPlane p = in_plane(w, col, Lanes::L);
  if (p.lo == 0 && p.hi == Lanes::L) {
    const Lanes::F v = Lanes::load_all(row + col);
    return RELU ? Lanes::relu(v) : v;
  }
  const Lanes::Mask in = Lanes::lanes_in(p);
  if (Lanes::none(in)) return Lanes::neg_inf();  // nothing to read (the address may be outside)
  Lanes::F v = Lanes::load(row + col, in);
  if constexpr (RELU) v = Lanes::relu_in(v, in);
  return v;
}

template <bool RELU>
inline Taps row_taps(const float* row, int64_t w, int64_t j0) {
  constexpr int64_t L = Lanes::L;
  const int64_t c = 2 * j0 - 1;  // column 2j − 1 of output j0
  const Lanes::F a0 = load_columns<RELU>(row, w, c), a1 = load_columns<RELU>(row, w, c + L);
  const Lanes::F b0 = load_columns<RELU>(row, w, c + 2), b1 = load_columns<RELU>(row, w, c + 2 + L);
  return {Lanes::evens(a0, a1), Lanes::odds(a0, a1), Lanes::evens(b0, b1)};
}

}  // namespace max_pool_3x3_s2

// One plane: x [h, w] → y, idx [oh, ow] (pool_cpu.cpp's max_forward_plane contract).
template <bool RELU>
void max_forward_3x3_s2_p1(const float* x, const Pool2dGeometry& g, float* y, int32_t* idx) {
  using namespace max_pool_3x3_s2;
  constexpr int64_t L = Lanes::L;
  const int64_t h = g.h, w = g.w;
  for (int64_t j0 = 0; j0 < g.ow; j0 += L) {
    const int64_t lanes = std::min<int64_t>(L, g.ow - j0);
    const Lanes::Mask out = Lanes::lanes_below(lanes);
    Taps below{};  // the taps of row 2i + 1, which are the next output row's top row
    for (int64_t i = 0; i < g.oh; ++i) {
      const int64_t r0 = std::max<int64_t>(2 * i - 1, 0);  // the window's first row in the plane
      Lanes::F best = Lanes::neg_inf();
      // Nothing beats −∞: the window's first element in the plane (column 2j − 1, or 0).
      Lanes::I at = Lanes::add(Lanes::splat(r0 * w + 2 * j0 - 1), Lanes::even_offsets());
      if (j0 == 0) at = Lanes::set_lane0(at, r0 * w);
      for (int64_t dr = 0; dr < 3; ++dr) {
        const int64_t r = 2 * i - 1 + dr;
        if (r < 0 || r >= h) continue;  // a padding row: all −∞, it never wins
        const Taps t = dr == 0 && i > 0 ? below : row_taps<RELU>(x + r * w, w, j0);
        if (dr == 2) below = t;
        const Lanes::I left = Lanes::add(Lanes::splat(r * w + 2 * j0 - 1), Lanes::even_offsets());
        Lanes::keep_max(t.left, left, best, at);
        Lanes::keep_max(t.centre, Lanes::add(left, Lanes::splat(1)), best, at);
        Lanes::keep_max(t.right, Lanes::add(left, Lanes::splat(2)), best, at);
      }
      if constexpr (RELU) at = Lanes::no_gradient_where_relu_fails(best, at);
      if (lanes == L)
        Lanes::store_all(y + i * g.ow + j0, idx + i * g.ow + j0, best, at);
      else
        Lanes::store(y + i * g.ow + j0, idx + i * g.ow + j0, out, best, at);
    }
  }
}

}  // namespace freight::cpu

#endif  // __AVX512F__ || __AVX2__
