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
#if defined(__AVX512F__)
// The operations draw_lanes needs, on 16 lanes.
struct Isa {
  using V = __m512i;
  static constexpr int64_t kLanes = 16;
  static V set1(uint32_t x) { return _mm512_set1_epi32(int32_t(x)); }
  static V zero() { return _mm512_setzero_si512(); }
  static V lanes() {
    return _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  }
  static V add(V a, V b) { return _mm512_add_epi32(a, b); }
  // hi + 1 in the lanes where lo + lanes wrapped past 2^32 (lo_lanes < lo, unsigned).
  static V carry_into(V hi, V lo_lanes, V lo) {
    return _mm512_mask_add_epi32(hi, _mm512_cmplt_epu32_mask(lo_lanes, lo), hi, set1(1));
  }
  static V xor3(V a, V b, V c) { return _mm512_ternarylogic_epi32(a, b, c, 0x96); }
  // _mm512_mul_epu32 multiplies the even lanes into 64-bit products; the odd lanes are shifted
  // down and multiplied the same way; blends gather the high and the low words.
  static void mulhilo(V a, V m, V& hi, V& lo) {
    const V even = _mm512_mul_epu32(a, m);
    const V odd = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), m);
    hi = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(even, 32), odd);
    lo = _mm512_mask_blend_epi32(0xAAAA, even, _mm512_slli_epi64(odd, 32));
  }
  // u_j holds, per 128-bit lane L, the four words of counter 4L + j; stores the counters in
  // order (a 4x4 transpose of 128-bit lanes).
  static void store_counters(V u0, V u1, V u2, V u3, uint32_t* out) {
    const V v0 = _mm512_shuffle_i32x4(u0, u1, 0x44), v1 = _mm512_shuffle_i32x4(u2, u3, 0x44);
    const V v2 = _mm512_shuffle_i32x4(u0, u1, 0xEE), v3 = _mm512_shuffle_i32x4(u2, u3, 0xEE);
    _mm512_storeu_si512(out, _mm512_shuffle_i32x4(v0, v1, 0x88));
    _mm512_storeu_si512(out + 16, _mm512_shuffle_i32x4(v0, v1, 0xDD));
    _mm512_storeu_si512(out + 32, _mm512_shuffle_i32x4(v2, v3, 0x88));
    _mm512_storeu_si512(out + 48, _mm512_shuffle_i32x4(v2, v3, 0xDD));
  }
  static V unpacklo32(V a, V b) { return _mm512_unpacklo_epi32(a, b); }
  static V unpackhi32(V a, V b) { return _mm512_unpackhi_epi32(a, b); }
  static V unpacklo64(V a, V b) { return _mm512_unpacklo_epi64(a, b); }
  static V unpackhi64(V a, V b) { return _mm512_unpackhi_epi64(a, b); }
};
#elif defined(__AVX2__)
// The same on 8 lanes.
struct Isa {
  using V = __m256i;
  static constexpr int64_t kLanes = 8;
  static V set1(uint32_t x) { return _mm256_set1_epi32(int32_t(x)); }
  static V zero() { return _mm256_setzero_si256(); }
  static V lanes() { return _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7); }
  static V add(V a, V b) { return _mm256_add_epi32(a, b); }
  // AVX2 compares signed only: flipping both sign bits turns it into the unsigned lo_lanes < lo;
  // the all-ones lanes of that mask subtract −1, which adds the carry.
  static V carry_into(V hi, V lo_lanes, V lo) {
    const V flip = set1(0x80000000u);
    return _mm256_sub_epi32(
        hi, _mm256_cmpgt_epi32(_mm256_xor_si256(lo, flip), _mm256_xor_si256(lo_lanes, flip)));
  }
  static V xor3(V a, V b, V c) { return _mm256_xor_si256(_mm256_xor_si256(a, b), c); }
  static void mulhilo(V a, V m, V& hi, V& lo) {
    const V even = _mm256_mul_epu32(a, m);
    const V odd = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), m);
    hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA);
    lo = _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA);
  }
  static void store_counters(V u0, V u1, V u2, V u3, uint32_t* out) {
    auto* o = reinterpret_cast<V*>(out);
    _mm256_storeu_si256(o, _mm256_permute2x128_si256(u0, u1, 0x20));
    _mm256_storeu_si256(o + 1, _mm256_permute2x128_si256(u2, u3, 0x20));
    _mm256_storeu_si256(o + 2, _mm256_permute2x128_si256(u0, u1, 0x31));
    _mm256_storeu_si256(o + 3, _mm256_permute2x128_si256(u2, u3, 0x31));
  }
  static V unpacklo32(V a, V b) { return _mm256_unpacklo_epi32(a, b); }
  static V unpackhi32(V a, V b) { return _mm256_unpackhi_epi32(a, b); }
  static V unpacklo64(V a, V b) { return _mm256_unpacklo_epi64(a, b); }
  static V unpackhi64(V a, V b) { return _mm256_unpackhi_epi64(a, b); }
};
#endif

#if defined(__AVX512F__) || defined(__AVX2__)
constexpr int64_t kLanes = Isa::kLanes;
// out[0 .. 4·kLanes) = the words of counters first .. first + kLanes − 1, counter by counter:
// philox::draw's rounds, one counter per lane.
inline void draw_lanes(uint64_t seed, uint64_t first, uint32_t* out) {
  using V = Isa::V;
  const V lo = Isa::set1(uint32_t(first));
  V c0 = Isa::add(lo, Isa::lanes());
  V c1 = Isa::carry_into(Isa::set1(uint32_t(first >> 32)), c0, lo);
  V c2 = Isa::zero(), c3 = Isa::zero();
  const V m0 = Isa::set1(philox::kM0), m1 = Isa::set1(philox::kM1);
  uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    V hi0, lo0, hi1, lo1;
    Isa::mulhilo(c0, m0, hi0, lo0);
    Isa::mulhilo(c2, m1, hi1, lo1);
    c0 = Isa::xor3(hi1, c1, Isa::set1(k0));
    c1 = lo1;
    c2 = Isa::xor3(hi0, c3, Isa::set1(k1));
    c3 = lo0;
    k0 += philox::kW0;
    k1 += philox::kW1;
  }
  // Interleave the word registers: per 128-bit lane L, u_j gets the four words of counter 4L + j.
  const V t0 = Isa::unpacklo32(c0, c1), t1 = Isa::unpackhi32(c0, c1);
  const V t2 = Isa::unpacklo32(c2, c3), t3 = Isa::unpackhi32(c2, c3);
  Isa::store_counters(Isa::unpacklo64(t0, t2), Isa::unpackhi64(t0, t2), Isa::unpacklo64(t1, t3),
                      Isa::unpackhi64(t1, t3), out);
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
