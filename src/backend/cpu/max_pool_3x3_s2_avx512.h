// Max pooling over 3x3 windows with stride 2 and padding 1 (AlexNet's overlapping pooling) on
// float planes with AVX-512, for pool_cpu.cpp. The general path reads each row through its stride
// phases in loops over one row of outputs at a time; on planes as narrow as AlexNet-CIFAR's
// (32 columns, 16 outputs a row) those loops are mostly their own set-up, and the pass took about
// seven times as long as reading its input. Here one vector holds 16 outputs of a row: each window
// row's three columns 2j − 1, 2j and 2j + 1 are the odd and even lanes of two 32-column spans,
// loaded masked (a column off the plane reads −∞, and never wins), and the nine taps are taken in
// the window's row-major order by the scalar rule of pool_cpu.cpp (a later tap wins when it is
// larger or NaN; with RELU the in-plane values are read through relu first), so outputs and
// indices are the general path's, bit for bit. Included only where __AVX512F__ is defined.
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "ops/kernels/pool.h"

namespace freight::cpu {

inline bool is_3x3_s2_p1(const Pool2dGeometry& g) {
  return g.kh == 3 && g.kw == 3 && g.sh == 2 && g.sw == 2 && g.ph == 1 && g.pw == 1;
}

namespace max_pool_avx512 {

// The three taps of one window row for 16 outputs from column 2·j0 on: columns 2j − 1, 2j and
// 2j + 1 of row `row` (w columns), −∞ off the plane.
struct Taps {
  __m512 left, centre, right;
};

// 16 columns from `col` (which may start before the plane or run past it), −∞ off the plane,
// read through relu with RELU.
template <bool RELU>
inline __m512 load_columns(const float* row, int64_t w, int64_t col) {
  const int64_t lo = std::clamp<int64_t>(-col, 0, 16), hi = std::clamp<int64_t>(w - col, 0, 16);
  const __mmask16 in = hi > lo ? __mmask16(((1u << hi) - 1) & ~((1u << lo) - 1)) : 0;
  const __m512 neg_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  if (in == 0) return neg_inf;  // nothing to read (the address may be out of the tensor)
  __m512 v = _mm512_mask_loadu_ps(neg_inf, in, row + col);
  if constexpr (RELU)  // relu_value in the plane (max(0, v) keeps a NaN and −0), −∞ off it
    v = _mm512_mask_mov_ps(neg_inf, in, _mm512_max_ps(_mm512_setzero_ps(), v));
  return v;
}

template <bool RELU>
inline Taps row_taps(const float* row, int64_t w, int64_t j0) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  const int64_t c = 2 * j0 - 1;  // column 2j − 1 of output j0
  const __m512 a0 = load_columns<RELU>(row, w, c), a1 = load_columns<RELU>(row, w, c + 16);
  const __m512 b0 = load_columns<RELU>(row, w, c + 2), b1 = load_columns<RELU>(row, w, c + 18);
  return {_mm512_permutex2var_ps(a0, even, a1), _mm512_permutex2var_ps(a0, odd, a1),
          _mm512_permutex2var_ps(b0, even, b1)};
}

// best, at ← v, i in the lanes where v is larger than best or NaN.
inline void keep_max(__m512 v, __m512i i, __m512& best, __m512i& at) {
  __mmask16 take = _mm512_cmp_ps_mask(v, best, _CMP_GT_OQ);
  take |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  best = _mm512_mask_mov_ps(best, take, v);
  at = _mm512_mask_mov_epi32(at, take, i);
}

}  // namespace max_pool_avx512

// One plane: x [h, w] → y, idx [oh, ow] (pool_cpu.cpp's max_forward_plane contract).
template <bool RELU>
void max_forward_3x3_s2_p1_avx512(const float* x, const Pool2dGeometry& g, float* y, int32_t* idx) {
  using namespace max_pool_avx512;
  const __m512i two_lane =
      _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512 neg_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  const int64_t h = g.h, w = g.w;
  for (int64_t j0 = 0; j0 < g.ow; j0 += 16) {
    const int64_t lanes = std::min<int64_t>(16, g.ow - j0);
    const __mmask16 out = __mmask16((uint32_t(1) << lanes) - 1);
    Taps below{};  // the taps of row 2i + 1, which are the next output row's top row
    for (int64_t i = 0; i < g.oh; ++i) {
      const int64_t r0 = std::max<int64_t>(2 * i - 1, 0);  // the window's first row in the plane
      __m512 best = neg_inf;
      // Nothing beats −∞: the window's first element in the plane (column 2j − 1, or 0).
      __m512i at = _mm512_add_epi32(_mm512_set1_epi32(int32_t(r0 * w + 2 * j0 - 1)), two_lane);
      if (j0 == 0) at = _mm512_mask_mov_epi32(at, 1, _mm512_set1_epi32(int32_t(r0 * w)));
      for (int64_t dr = 0; dr < 3; ++dr) {
        const int64_t r = 2 * i - 1 + dr;
        if (r < 0 || r >= h) continue;  // a padding row: all −∞, it never wins
        const Taps t = dr == 0 && i > 0 ? below : row_taps<RELU>(x + r * w, w, j0);
        if (dr == 2) below = t;
        const __m512i left =
            _mm512_add_epi32(_mm512_set1_epi32(int32_t(r * w + 2 * j0 - 1)), two_lane);
        const __m512i one = _mm512_set1_epi32(1);
        keep_max(t.left, left, best, at);
        keep_max(t.centre, _mm512_add_epi32(left, one), best, at);
        keep_max(t.right, _mm512_add_epi32(left, _mm512_add_epi32(one, one)), best, at);
      }
      if constexpr (RELU)  // where relu_passes(best) fails (best <= 0), no gradient
        at = _mm512_mask_mov_epi32(_mm512_set1_epi32(-1),
                                   _mm512_cmp_ps_mask(best, _mm512_setzero_ps(), _CMP_NLE_UQ), at);
      _mm512_mask_storeu_ps(y + i * g.ow + j0, out, best);
      _mm512_mask_storeu_epi32(idx + i * g.ow + j0, out, at);
    }
  }
}

}  // namespace freight::cpu
