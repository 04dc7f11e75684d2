// Philox-4x32-10 (core/philox.h) for a run of consecutive counters at once, one counter per
// 32-bit SIMD lane. Left to itself GCC vectorised philox::draw on 64-bit lanes (its products are
// 32x32->64) and spent most of each round packing and unpacking them; here the four words of 16
// (AVX-512) or 8 (AVX2) counters sit in four registers, and each round's two products take four
// even/odd-lane multiplies and blends. The bits are those of philox::draw, word for word.
#pragma once
#include <cstdint>

#include "core/philox.h"

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

namespace freight::cpu {

namespace philox_simd {
using philox::kM0, philox::kM1, philox::kW0, philox::kW1;

#if defined(__AVX512F__)
// hi, lo: the high and low words of a·m in each 32-bit lane. _mm512_mul_epu32 multiplies the
// even lanes into 64-bit products; the odd lanes are shifted down and multiplied the same way.
inline void mulhilo(__m512i a, __m512i m, __m512i& hi, __m512i& lo) {
  const __m512i even = _mm512_mul_epu32(a, m);
  const __m512i odd = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), m);
  hi = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(even, 32), odd);
  lo = _mm512_mask_blend_epi32(0xAAAA, even, _mm512_slli_epi64(odd, 32));
}

// out[0..63] = the words of counters first .. first + 15, counter by counter.
inline void draw16(uint64_t seed, uint64_t first, uint32_t* out) {
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i lo_base = _mm512_set1_epi32(int32_t(uint32_t(first)));
  __m512i c0 = _mm512_add_epi32(lo_base, lane);
  // A lane whose low word wrapped past 2^32 carries one into its high word.
  const __mmask16 carry = _mm512_cmplt_epu32_mask(c0, lo_base);
  const __m512i hi_base = _mm512_set1_epi32(int32_t(uint32_t(first >> 32)));
  __m512i c1 = _mm512_mask_add_epi32(hi_base, carry, hi_base, _mm512_set1_epi32(1));
  __m512i c2 = _mm512_setzero_si512(), c3 = _mm512_setzero_si512();
  const __m512i m0 = _mm512_set1_epi32(int32_t(kM0)), m1 = _mm512_set1_epi32(int32_t(kM1));
  uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    __m512i hi0, lo0, hi1, lo1;
    mulhilo(c0, m0, hi0, lo0);
    mulhilo(c2, m1, hi1, lo1);
    // 0x96: the three-way exclusive or.
    c0 = _mm512_ternarylogic_epi32(hi1, c1, _mm512_set1_epi32(int32_t(k0)), 0x96);
    c1 = lo1;
    c2 = _mm512_ternarylogic_epi32(hi0, c3, _mm512_set1_epi32(int32_t(k1)), 0x96);
    c3 = lo0;
    k0 += kW0;
    k1 += kW1;
  }
  // Transpose the four word registers into counter order: per 128-bit lane L, u_j holds the
  // four words of counter 4L + j; then a 4x4 transpose of 128-bit lanes.
  const __m512i t0 = _mm512_unpacklo_epi32(c0, c1), t1 = _mm512_unpackhi_epi32(c0, c1);
  const __m512i t2 = _mm512_unpacklo_epi32(c2, c3), t3 = _mm512_unpackhi_epi32(c2, c3);
  const __m512i u0 = _mm512_unpacklo_epi64(t0, t2), u1 = _mm512_unpackhi_epi64(t0, t2);
  const __m512i u2 = _mm512_unpacklo_epi64(t1, t3), u3 = _mm512_unpackhi_epi64(t1, t3);
  const __m512i v0 = _mm512_shuffle_i32x4(u0, u1, 0x44), v1 = _mm512_shuffle_i32x4(u2, u3, 0x44);
  const __m512i v2 = _mm512_shuffle_i32x4(u0, u1, 0xEE), v3 = _mm512_shuffle_i32x4(u2, u3, 0xEE);
  _mm512_storeu_si512(out, _mm512_shuffle_i32x4(v0, v1, 0x88));
  _mm512_storeu_si512(out + 16, _mm512_shuffle_i32x4(v0, v1, 0xDD));
  _mm512_storeu_si512(out + 32, _mm512_shuffle_i32x4(v2, v3, 0x88));
  _mm512_storeu_si512(out + 48, _mm512_shuffle_i32x4(v2, v3, 0xDD));
}
constexpr int64_t kLanes = 16;
inline void draw_lanes(uint64_t seed, uint64_t first, uint32_t* out) {
  draw16(seed, first, out);
}

#elif defined(__AVX2__)
inline void mulhilo(__m256i a, __m256i m, __m256i& hi, __m256i& lo) {
  const __m256i even = _mm256_mul_epu32(a, m);
  const __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), m);
  hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA);
  lo = _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA);
}

// out[0..31] = the words of counters first .. first + 7, counter by counter.
inline void draw8(uint64_t seed, uint64_t first, uint32_t* out) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i lo_base = _mm256_set1_epi32(int32_t(uint32_t(first)));
  __m256i c0 = _mm256_add_epi32(lo_base, lane);
  // Unsigned c0 < lo_base (a wrapped low word) as a signed comparison with the sign bits flipped;
  // the all-ones lanes of the mask subtract -1, that is add the carry.
  const __m256i flip = _mm256_set1_epi32(int32_t(0x80000000u));
  const __m256i carry =
      _mm256_cmpgt_epi32(_mm256_xor_si256(lo_base, flip), _mm256_xor_si256(c0, flip));
  __m256i c1 = _mm256_sub_epi32(_mm256_set1_epi32(int32_t(uint32_t(first >> 32))), carry);
  __m256i c2 = _mm256_setzero_si256(), c3 = _mm256_setzero_si256();
  const __m256i m0 = _mm256_set1_epi32(int32_t(kM0)), m1 = _mm256_set1_epi32(int32_t(kM1));
  uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    __m256i hi0, lo0, hi1, lo1;
    mulhilo(c0, m0, hi0, lo0);
    mulhilo(c2, m1, hi1, lo1);
    c0 = _mm256_xor_si256(_mm256_xor_si256(hi1, c1), _mm256_set1_epi32(int32_t(k0)));
    c1 = lo1;
    c2 = _mm256_xor_si256(_mm256_xor_si256(hi0, c3), _mm256_set1_epi32(int32_t(k1)));
    c3 = lo0;
    k0 += kW0;
    k1 += kW1;
  }
  // Per 128-bit lane L, u_j holds the four words of counter 4L + j.
  const __m256i t0 = _mm256_unpacklo_epi32(c0, c1), t1 = _mm256_unpackhi_epi32(c0, c1);
  const __m256i t2 = _mm256_unpacklo_epi32(c2, c3), t3 = _mm256_unpackhi_epi32(c2, c3);
  const __m256i u0 = _mm256_unpacklo_epi64(t0, t2), u1 = _mm256_unpackhi_epi64(t0, t2);
  const __m256i u2 = _mm256_unpacklo_epi64(t1, t3), u3 = _mm256_unpackhi_epi64(t1, t3);
  auto* o = reinterpret_cast<__m256i*>(out);
  _mm256_storeu_si256(o, _mm256_permute2x128_si256(u0, u1, 0x20));
  _mm256_storeu_si256(o + 1, _mm256_permute2x128_si256(u2, u3, 0x20));
  _mm256_storeu_si256(o + 2, _mm256_permute2x128_si256(u0, u1, 0x31));
  _mm256_storeu_si256(o + 3, _mm256_permute2x128_si256(u2, u3, 0x31));
}
constexpr int64_t kLanes = 8;
inline void draw_lanes(uint64_t seed, uint64_t first, uint32_t* out) {
  draw8(seed, first, out);
}

#else
constexpr int64_t kLanes = 1;
inline void draw_lanes(uint64_t seed, uint64_t first, uint32_t* out) {
  const philox::U32x4 r = philox::draw(seed, first);
  for (int j = 0; j < 4; ++j) out[j] = r.v[j];
}
#endif
}  // namespace philox_simd

// out[4k + j] = philox::draw(seed, first + k).v[j] for k in [0, n).
inline void philox_block(uint64_t seed, uint64_t first, int64_t n, uint32_t* out) {
  int64_t k = 0;
  for (; k + philox_simd::kLanes <= n; k += philox_simd::kLanes)
    philox_simd::draw_lanes(seed, first + uint64_t(k), out + 4 * k);
  for (; k < n; ++k) {
    const philox::U32x4 r = philox::draw(seed, first + uint64_t(k));
    for (int j = 0; j < 4; ++j) out[4 * k + j] = r.v[j];
  }
}

}  // namespace freight::cpu
