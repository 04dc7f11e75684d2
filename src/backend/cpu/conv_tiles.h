// AVX-512 register tiles of the CPU convolution (float32 and float64). Internal to conv_cpu.cpp.
#pragma once
#if defined(__AVX512F__)
// GCC 12's reduction intrinsics start from _mm256_undefined_pd(), which its own
// -Wuninitialized flags once inlined; the warning points into this header.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <cstdint>

namespace freight::cpu::conv_tiles {

template <class T>
struct Simd;
template <>
struct Simd<float> {
  using V = __m512;
  static constexpr int kLanes = 16;
  static V zero() { return _mm512_setzero_ps(); }
  static V set1(float x) { return _mm512_set1_ps(x); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static float sum(V v) { return _mm512_reduce_add_ps(v); }
  // The first n <= kLanes lanes (the others load as 0, and are not stored).
  static V load_n(const float* p, int n) {
    return _mm512_maskz_loadu_ps(__mmask16((1u << n) - 1), p);
  }
  static void store_n(float* p, V v, int n) {
    _mm512_mask_storeu_ps(p, __mmask16((1u << n) - 1), v);
  }
  // The lanes set in `mask`.
  static void store_mask(float* p, V v, uint32_t mask) {
    _mm512_mask_storeu_ps(p, __mmask16(mask), v);
  }
};
template <>
struct Simd<double> {
  using V = __m512d;
  static constexpr int kLanes = 8;
  static V zero() { return _mm512_setzero_pd(); }
  static V set1(double x) { return _mm512_set1_pd(x); }
  static V load(const double* p) { return _mm512_loadu_pd(p); }
  static void store(double* p, V v) { _mm512_storeu_pd(p, v); }
  static V add(V a, V b) { return _mm512_add_pd(a, b); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_pd(a, b, c); }
  static double sum(V v) { return _mm512_reduce_add_pd(v); }
  static V load_n(const double* p, int n) {
    return _mm512_maskz_loadu_pd(__mmask8((1u << n) - 1), p);
  }
  static void store_n(double* p, V v, int n) {
    _mm512_mask_storeu_pd(p, __mmask8((1u << n) - 1), v);
  }
  static void store_mask(double* p, V v, uint32_t mask) {
    _mm512_mask_storeu_pd(p, __mmask8(mask), v);
  }
};

// dst[0, n) = src[0, n) with masked vector moves. The rows copied around the tiles are short
// (one image row), where a memcpy call costs more than the copy; GCC turns a plain loop (even
// one of unmasked vector moves) into such a call, but not masked moves.
template <class T>
inline void copy_n(const T* __restrict src, int64_t n, T* __restrict dst) {
  using S = Simd<T>;
  for (int64_t i = 0; i < n; i += S::kLanes) {
    const int m = int(n - i < S::kLanes ? n - i : S::kLanes);
    S::store_n(dst + i, S::load_n(src + i, m), m);
  }
}

// ---------------------------------------------------------------- GEMM tile
// MR output rows (one weight row each, broadcast) × kNV vectors of output pixels. At MR = 8 the
// 24 accumulators leave registers for the 3 pixel vectors and a broadcast; each step issues 24
// FMAs for 3 vector loads and 8 broadcasts, so the loop runs at the FMA throughput.
constexpr int kMR = 8, kNV = 3;

// Stores accumulator (m, u) of a tile at c + m·ldc + u·lanes: a row-major C.
template <class T>
struct RowStore {
  T* c;
  int64_t ldc;
  void operator()(int m, int u, typename Simd<T>::V v) const {
    Simd<T>::store(c + m * ldc + u * Simd<T>::kLanes, v);
  }
};

// acc[m][u] = init[m] + Σ_k a[k·MR + m] · b[offs[k] + u·lanes + (0, lanes)] for u < NV, then
// store(m, u, acc[m][u]). a: the weights' micro-panel (MR rows interleaved per k). Row k of B
// starts at b + offs[k]: consecutive rows of a packed panel, or shifted windows of a padded
// input plane. NV < kNV serves the last, narrower tile of a row of pixels.
template <class T, int MR, int NV, class Store>
inline void gemm_tile(const T* __restrict a, const T* __restrict b, const int64_t* __restrict offs,
                      int64_t K, const T* __restrict init, const Store& store) {
  using S = Simd<T>;
  constexpr int W = S::kLanes;
  typename S::V acc[MR][NV];
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m) {
    typename S::V v = init ? S::set1(init[m]) : S::zero();
#pragma GCC unroll 3
    for (int u = 0; u < NV; ++u) acc[m][u] = v;
  }
  for (int64_t k = 0; k < K; ++k) {
    const T* bk = b + offs[k];
    typename S::V bv[NV];
#pragma GCC unroll 3
    for (int u = 0; u < NV; ++u) bv[u] = S::load(bk + u * W);
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) {
      typename S::V am = S::set1(a[m]);
#pragma GCC unroll 3
      for (int u = 0; u < NV; ++u) acc[m][u] = S::fma(am, bv[u], acc[m][u]);
    }
    a += MR;
  }
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m) {
#pragma GCC unroll 3
    for (int u = 0; u < NV; ++u) store(m, u, acc[m][u]);
  }
}

// The same for mr = 1..8 rows (the last block when the rows are not a multiple of 8) and
// nv = 1..kNV vectors.
template <class T, int NV, class Store>
void gemm_tile_rows_nv(int mr, const T* a, const T* b, const int64_t* offs, int64_t K,
                       const T* init, const Store& store) {
  switch (mr) {
#define FREIGHT_GEMM_CASE(n)                         \
  case n:                                            \
    gemm_tile<T, n, NV>(a, b, offs, K, init, store); \
    break;
    FREIGHT_GEMM_CASE(8)
    FREIGHT_GEMM_CASE(7)
    FREIGHT_GEMM_CASE(6)
    FREIGHT_GEMM_CASE(5)
    FREIGHT_GEMM_CASE(4)
    FREIGHT_GEMM_CASE(3)
    FREIGHT_GEMM_CASE(2)
#undef FREIGHT_GEMM_CASE
    default:
      gemm_tile<T, 1, NV>(a, b, offs, K, init, store);
      break;
  }
}
template <class T, class Store>
void gemm_tile_rows(int mr, int nv, const T* a, const T* b, const int64_t* offs, int64_t K,
                    const T* init, const Store& store) {
  if (nv >= 3)
    gemm_tile_rows_nv<T, 3>(mr, a, b, offs, K, init, store);
  else if (nv == 2)
    gemm_tile_rows_nv<T, 2>(mr, a, b, offs, K, init, store);
  else
    gemm_tile_rows_nv<T, 1>(mr, a, b, offs, K, init, store);
}
template <class T>
void gemm_tile_rows(int mr, const T* a, const T* b, const int64_t* offs, int64_t K, const T* init,
                    T* c, int64_t ldc) {
  gemm_tile_rows_nv<T, kNV>(mr, a, b, offs, K, init, RowStore<T>{c, ldc});
}

// ---------------------------------------------------------------- weight-gradient tile
// dw[o][u] += Σ_images Σ_l dy[o][l] · col_u[l] for MO rows of dy and kMK rows of col, l over
// [0, L) (a multiple of the lane count). Lane-wise partial sums stay in registers over all
// pixels of all images and are reduced once at the end, so both operands stream in their
// natural row layout (no transposition). Image i's rows are at dy + i·dy_img + o·ldy and
// col + i·col_img + koff[u].
constexpr int kMO = 8, kMK = 3;
template <class T, int MO>
inline void dw_tile(const T* __restrict dy, int64_t ldy, int64_t dy_img, const T* __restrict col,
                    const int64_t* koff, int64_t col_img, int64_t images, int64_t L,
                    T* __restrict dw, int64_t ldw) {
  using S = Simd<T>;
  constexpr int W = S::kLanes;
  typename S::V acc[MO][kMK];
#pragma GCC unroll 8
  for (int o = 0; o < MO; ++o) {
#pragma GCC unroll 3
    for (int u = 0; u < kMK; ++u) acc[o][u] = S::zero();
  }
  for (int64_t i = 0; i < images; ++i) {
    const T* d = dy + i * dy_img;
    const T* r0 = col + i * col_img + koff[0];
    const T* r1 = col + i * col_img + koff[1];
    const T* r2 = col + i * col_img + koff[2];
    for (int64_t l = 0; l < L; l += W) {
      typename S::V c0 = S::load(r0 + l), c1 = S::load(r1 + l), c2 = S::load(r2 + l);
#pragma GCC unroll 8
      for (int o = 0; o < MO; ++o) {
        typename S::V v = S::load(d + o * ldy + l);
        acc[o][0] = S::fma(v, c0, acc[o][0]);
        acc[o][1] = S::fma(v, c1, acc[o][1]);
        acc[o][2] = S::fma(v, c2, acc[o][2]);
      }
    }
  }
#pragma GCC unroll 8
  for (int o = 0; o < MO; ++o) {
#pragma GCC unroll 3
    for (int u = 0; u < kMK; ++u) dw[o * ldw + u] += S::sum(acc[o][u]);
  }
}

template <class T>
void dw_tile_rows(int mo, const T* dy, int64_t ldy, int64_t dy_img, const T* col,
                  const int64_t* koff, int64_t col_img, int64_t images, int64_t L, T* dw,
                  int64_t ldw) {
  switch (mo) {
#define FREIGHT_DW_CASE(n)                                                  \
  case n:                                                                   \
    dw_tile<T, n>(dy, ldy, dy_img, col, koff, col_img, images, L, dw, ldw); \
    break;
    FREIGHT_DW_CASE(8)
    FREIGHT_DW_CASE(7)
    FREIGHT_DW_CASE(6)
    FREIGHT_DW_CASE(5)
    FREIGHT_DW_CASE(4)
    FREIGHT_DW_CASE(3)
    FREIGHT_DW_CASE(2)
#undef FREIGHT_DW_CASE
    default:
      dw_tile<T, 1>(dy, ldy, dy_img, col, koff, col_img, images, L, dw, ldw);
      break;
  }
}

}  // namespace freight::cpu::conv_tiles
#endif
