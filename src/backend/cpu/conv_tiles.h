// Register tiles of the CPU convolution (float32 and float64) for the two vector levels the CPU
// kernels are built at: AVX-512 (16 float lanes, 32 registers) and AVX2 with FMA (8 lanes, 16
// registers). Internal to conv_cpu.cpp. The tiles are written once against Simd<T>; each level
// sets its lanes and how many accumulators a tile keeps (kAccumulators), so that accumulators,
// operand vectors and a broadcast fit the register file without spilling.
#pragma once
#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#define FREIGHT_CONV_TILES 1
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
#if defined(__AVX512F__)
// Accumulators per tile: 24 of the 32 registers, leaving the operand vectors and a broadcast.
constexpr int kAccumulators = 24;
template <>
struct Simd<float> {
  using V = __m512;
  static constexpr int kLanes = 16;
  static V zero() { return _mm512_setzero_ps(); }
  static V set1(float x) { return _mm512_set1_ps(x); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static void stream(float* p, V v) { _mm512_stream_ps(p, v); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  // relu_value per lane, v < 0 ? 0 : v: max(a, b) is a > b ? a : b, so max(0, v) returns v when
  // v is NaN or −0, as the scalar rule does.
  static V relu(V v) { return _mm512_max_ps(zero(), v); }
  // relu's backward per lane: g where relu_passes(y) (y > 0 or NaN: not y <= 0), else 0.
  static V relu_grad(V y, V g) {
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(y, zero(), _CMP_NLE_UQ), g);
  }
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
  static void stream(double* p, V v) { _mm512_stream_pd(p, v); }
  static V add(V a, V b) { return _mm512_add_pd(a, b); }
  static V sub(V a, V b) { return _mm512_sub_pd(a, b); }
  static V mul(V a, V b) { return _mm512_mul_pd(a, b); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_pd(a, b, c); }
  static V relu(V v) { return _mm512_max_pd(zero(), v); }  // as Simd<float>::relu
  static V relu_grad(V y, V g) {                           // as Simd<float>::relu_grad
    return _mm512_maskz_mov_pd(_mm512_cmp_pd_mask(y, zero(), _CMP_NLE_UQ), g);
  }
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
#else  // AVX2 + FMA: 16 registers, 12 of them accumulators
constexpr int kAccumulators = 12;
// Lanes [0, n) of a mask vector set (all bits), the others clear.
inline __m256i first_lanes32(int n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
inline __m256i first_lanes64(int n) {
  return _mm256_cmpgt_epi64(_mm256_set1_epi64x(n), _mm256_setr_epi64x(0, 1, 2, 3));
}
template <>
struct Simd<float> {
  using V = __m256;
  static constexpr int kLanes = 8;
  static V zero() { return _mm256_setzero_ps(); }
  static V set1(float x) { return _mm256_set1_ps(x); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static void stream(float* p, V v) { _mm256_stream_ps(p, v); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  // max(a, b) is a > b ? a : b here too: NaN and −0 pass, as relu_value.
  static V relu(V v) { return _mm256_max_ps(zero(), v); }
  // relu's backward per lane: g where relu_passes(y) (y > 0 or NaN: not y <= 0), else 0.
  static V relu_grad(V y, V g) { return _mm256_and_ps(_mm256_cmp_ps(y, zero(), _CMP_NLE_UQ), g); }
  static float sum(V v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
  }
  static V load_n(const float* p, int n) { return _mm256_maskload_ps(p, first_lanes32(n)); }
  static void store_n(float* p, V v, int n) { _mm256_maskstore_ps(p, first_lanes32(n), v); }
  // A full mask stores plainly (AVX2's masked store costs more on some CPUs; lane by lane from
  // a copy on the stack measured slower still on the AMD EPYC Zen 3).
  static void store_mask(float* p, V v, uint32_t mask) {
    if (mask == 0xFFu) return store(p, v);
    const __m256i bits = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    const __m256i m =
        _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(int(mask)), bits), bits);
    _mm256_maskstore_ps(p, m, v);
  }
};
template <>
struct Simd<double> {
  using V = __m256d;
  static constexpr int kLanes = 4;
  static V zero() { return _mm256_setzero_pd(); }
  static V set1(double x) { return _mm256_set1_pd(x); }
  static V load(const double* p) { return _mm256_loadu_pd(p); }
  static void store(double* p, V v) { _mm256_storeu_pd(p, v); }
  static void stream(double* p, V v) { _mm256_stream_pd(p, v); }
  static V add(V a, V b) { return _mm256_add_pd(a, b); }
  static V sub(V a, V b) { return _mm256_sub_pd(a, b); }
  static V mul(V a, V b) { return _mm256_mul_pd(a, b); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_pd(a, b, c); }
  static V relu(V v) { return _mm256_max_pd(zero(), v); }  // as Simd<float>::relu
  static V relu_grad(V y, V g) {                           // as Simd<float>::relu_grad
    return _mm256_and_pd(_mm256_cmp_pd(y, zero(), _CMP_NLE_UQ), g);
  }
  static double sum(V v) {
    __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
    return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
  }
  static V load_n(const double* p, int n) { return _mm256_maskload_pd(p, first_lanes64(n)); }
  static void store_n(double* p, V v, int n) { _mm256_maskstore_pd(p, first_lanes64(n), v); }
  static void store_mask(double* p, V v, uint32_t mask) {
    if (mask == 0xFu) return store(p, v);
    const __m256i bits = _mm256_setr_epi64x(1, 2, 4, 8);
    const __m256i m =
        _mm256_cmpeq_epi64(_mm256_and_si256(_mm256_set1_epi64x(int64_t(mask)), bits), bits);
    _mm256_maskstore_pd(p, m, v);
  }
};
#endif

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
// MR output rows (one weight row each, broadcast) × kNV vectors of output pixels. At MR = 8
// (AVX-512) the 24 accumulators leave registers for the 3 pixel vectors and a broadcast; each
// step issues 24 FMAs for 3 vector loads and 8 broadcasts, so the loop runs at the FMA
// throughput. AVX2's 16 registers hold MR = 4 rows: 12 FMAs for 3 loads and 4 broadcasts.
constexpr int kNV = 3, kMR = kAccumulators / kNV;

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

// The same for mr = 1..kMR rows (the last block when the rows are not a multiple of kMR) and
// nv = 1..kNV vectors: the tile compiled for MR rows when mr is MR, else one for fewer.
template <class T, int NV, class Store, int MR = kMR>
void gemm_tile_rows_nv(int mr, const T* a, const T* b, const int64_t* offs, int64_t K,
                       const T* init, const Store& store) {
  if constexpr (MR > 1)
    if (mr < MR) return gemm_tile_rows_nv<T, NV, Store, MR - 1>(mr, a, b, offs, K, init, store);
  gemm_tile<T, MR, NV>(a, b, offs, K, init, store);
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
// col + i·col_img + koff[u]. MO·kMK accumulators, kMK column vectors and one dY vector.
constexpr int kMK = 3, kMO = kAccumulators / kMK;
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

// The same for mo = 1..kMO rows of dy: the tile compiled for MO rows when mo is MO, else one for
// fewer.
template <class T, int MO = kMO>
void dw_tile_rows(int mo, const T* dy, int64_t ldy, int64_t dy_img, const T* col,
                  const int64_t* koff, int64_t col_img, int64_t images, int64_t L, T* dw,
                  int64_t ldw) {
  if constexpr (MO > 1)
    if (mo < MO)
      return dw_tile_rows<T, MO - 1>(mo, dy, ldy, dy_img, col, koff, col_img, images, L, dw, ldw);
  dw_tile<T, MO>(dy, ldy, dy_img, col, koff, col_img, images, L, dw, ldw);
}

// ---------------------------------------------------------------- transposed weight-gradient tile
// The same sums with the roles turned round, for when the output channels fill whole vectors:
// dWᵀ[k][o] = Σ_t x[koff[k] + t] · dYᵀ[t][o]. Each step broadcasts KT input values (one per
// weight tap) against OV vectors of output channels of one pixel, so it loads OV vectors and KT
// scalars per KT·OV FMAs (the pixel-vector form above loads a vector per row), and the sums
// come out whole, without reductions across lanes. The pixels come in `rows` rows of `len`:
//   acc[u][v] = Σ_images Σ_{r < rows} Σ_{j < len}
//               x_i[r·x_row + koff[u] + j·SW] · dyT_i[(r·len + j)·ldo + v·lanes + (0, lanes)]
//   dwT[u·ldo + v·lanes + (0, lanes)] += acc[u][v]
// where x_i = x + i·x_img and dyT_i = dyT + i·dy_img (the implicit engine passes one row of
// virtual pixels; the direct engine the output rows, SW = the horizontal stride).
struct PixelRows {
  int64_t images, rows, len;  // the pixels summed over
  int64_t dy_img, x_img;      // image strides of dyT and x
  int64_t x_row;              // input offset between output rows
};
template <class T, int KT, int OV, int SW>
inline void dwt_tile(const T* __restrict dyT, int64_t ldo, const T* __restrict x,
                     const int64_t* koff, const PixelRows& px, T* __restrict dwT) {
  using S = Simd<T>;
  constexpr int W = S::kLanes;
  typename S::V acc[KT][OV];
#pragma GCC unroll 8
  for (int u = 0; u < KT; ++u) {
#pragma GCC unroll 4
    for (int v = 0; v < OV; ++v) acc[u][v] = S::zero();
  }
  for (int64_t i = 0; i < px.images; ++i)
    for (int64_t row = 0; row < px.rows; ++row) {
      const T* d = dyT + i * px.dy_img + row * px.len * ldo;
      const T* r[KT];
#pragma GCC unroll 8
      for (int u = 0; u < KT; ++u) r[u] = x + i * px.x_img + row * px.x_row + koff[u];
      for (int64_t j = 0; j < px.len; ++j) {
        typename S::V dv[OV];
#pragma GCC unroll 4
        for (int v = 0; v < OV; ++v) dv[v] = S::load(d + j * ldo + v * W);
#pragma GCC unroll 8
        for (int u = 0; u < KT; ++u) {
          typename S::V b = S::set1(r[u][j * SW]);
#pragma GCC unroll 4
          for (int v = 0; v < OV; ++v) acc[u][v] = S::fma(b, dv[v], acc[u][v]);
        }
      }
    }
#pragma GCC unroll 8
  for (int u = 0; u < KT; ++u) {
#pragma GCC unroll 4
    for (int v = 0; v < OV; ++v) {
      T* p = dwT + u * ldo + v * W;
      S::store(p, S::add(S::load(p), acc[u][v]));
    }
  }
}

// Vectors of output channels a transposed or direct tile takes at most.
constexpr int kMaxOV = kAccumulators == 24 ? 4 : 3;

// How many of nvec channel vectors the tile starting at vector v0 takes: the vectors split as
// evenly as tiles of at most kMaxOV allow (four on AVX2 run as 2 + 2, not 3 + 1, whose
// one-vector tile loads a broadcast for every FMA). Each output's sum runs in the same order
// whatever the split.
inline int tile_vectors(int64_t nvec, int64_t v0) {
  const int64_t tiles = (nvec + kMaxOV - 1) / kMaxOV, base = nvec / tiles;
  return int(v0 < (nvec % tiles) * (base + 1) ? base + 1 : base);
}

// Taps per transposed tile for ov output-channel vectors: kt·ov accumulators, ov loaded vectors
// and a broadcast within the register file (AVX-512: 24 accumulators at most; AVX2: 12).
inline int dwt_taps(int ov) {
  if constexpr (kAccumulators == 24) return ov >= 4 ? 6 : 8;
  return ov >= 3 ? 4 : ov == 2 ? 6 : 8;
}

template <class T, int OV, int SW>
void dwt_tile_kt(int kt, const T* dyT, int64_t ldo, const T* x, const int64_t* koff,
                 const PixelRows& px, T* dwT) {
  switch (kt) {
    case 8:
      dwt_tile<T, 8, OV, SW>(dyT, ldo, x, koff, px, dwT);
      break;
    case 6:
      dwt_tile<T, 6, OV, SW>(dyT, ldo, x, koff, px, dwT);
      break;
    case 4:
      dwt_tile<T, 4, OV, SW>(dyT, ldo, x, koff, px, dwT);
      break;
    case 2:
      dwt_tile<T, 2, OV, SW>(dyT, ldo, x, koff, px, dwT);
      break;
    default:
      dwt_tile<T, 1, OV, SW>(dyT, ldo, x, koff, px, dwT);
      break;
  }
}

// dWᵀ rows [0, K) for ov channel vectors (at dyT and dwT): full tiles of dwt_taps(ov) taps,
// the rest in tiles of 4, 2 and 1.
template <class T, int SW>
void dwt_tiles(int ov, int64_t K, const T* dyT, int64_t ldo, const T* x, const int64_t* koff,
               const PixelRows& px, T* dwT) {
  for (int64_t k0 = 0; k0 < K;) {
    const int64_t left = K - k0;
    const int full = dwt_taps(ov);
    const int kt = left >= full ? full : left >= 4 ? 4 : left >= 2 ? 2 : 1;
    T* out = dwT + k0 * ldo;
    switch (ov) {
      case 4:
        if constexpr (kMaxOV >= 4) dwt_tile_kt<T, 4, SW>(kt, dyT, ldo, x, koff + k0, px, out);
        break;
      case 3:
        dwt_tile_kt<T, 3, SW>(kt, dyT, ldo, x, koff + k0, px, out);
        break;
      case 2:
        dwt_tile_kt<T, 2, SW>(kt, dyT, ldo, x, koff + k0, px, out);
        break;
      default:
        dwt_tile_kt<T, 1, SW>(kt, dyT, ldo, x, koff + k0, px, out);
        break;
    }
    k0 += kt;
  }
}

// ---------------------------------------------------------------- direct tile
// The forward GEMM with the roles of the tile swapped: MP consecutive output pixels of one row
// (broadcast from the padded input, SW apart) × OV vectors of output channels (from the
// transposed weights wT[k][o]):
//   acc[m][v] = (partial ? io[m·ldo + v·lanes] : init[v·lanes]) + Σ_k x[koff[k] + m·SW] · wT[k·ldo
//   + v·lanes] io[m·ldo + v·lanes] = acc[m][v]
// With only MP·OV accumulators and one input pointer it needs no unrolled patches and wastes
// nothing on padding columns or strides; the output comes out pixel-major ([pixel][channel]).
template <class T, int MP, int OV, int SW>
inline void direct_tile(const T* __restrict wT, int64_t ldo, const T* __restrict x,
                        const int64_t* __restrict koff, int64_t K, const T* __restrict init,
                        bool partial, T* __restrict io) {
  using S = Simd<T>;
  constexpr int W = S::kLanes;
  typename S::V acc[MP][OV];
#pragma GCC unroll 24
  for (int m = 0; m < MP; ++m) {
#pragma GCC unroll 4
    for (int v = 0; v < OV; ++v)
      acc[m][v] = partial ? S::load(io + m * ldo + v * W)
                  : init  ? S::load(init + v * W)
                          : S::zero();
  }
  for (int64_t k = 0; k < K; ++k) {
    typename S::V wv[OV];
#pragma GCC unroll 4
    for (int v = 0; v < OV; ++v) wv[v] = S::load(wT + k * ldo + v * W);
    const T* xk = x + koff[k];
#pragma GCC unroll 24
    for (int m = 0; m < MP; ++m) {
      typename S::V b = S::set1(xk[m * SW]);
#pragma GCC unroll 4
      for (int v = 0; v < OV; ++v) acc[m][v] = S::fma(b, wv[v], acc[m][v]);
    }
  }
#pragma GCC unroll 24
  for (int m = 0; m < MP; ++m) {
#pragma GCC unroll 4
    for (int v = 0; v < OV; ++v) S::store(io + m * ldo + v * W, acc[m][v]);
  }
}

// Pixels per direct tile for ov channel vectors (kAccumulators accumulators; ov <= kMaxOV).
constexpr int direct_pixels(int ov) {
  return kAccumulators / (ov < 1 ? 1 : ov > kMaxOV ? kMaxOV : ov);
}

template <class T, int OV, int SW>
void direct_tile_mp(int mp, const T* wT, int64_t ldo, const T* x, const int64_t* koff, int64_t K,
                    const T* init, bool partial, T* io) {
  constexpr int kMain = direct_pixels(OV);
  if (mp == kMain)
    direct_tile<T, kMain, OV, SW>(wT, ldo, x, koff, K, init, partial, io);
  else if (mp == 4)
    direct_tile<T, 4, OV, SW>(wT, ldo, x, koff, K, init, partial, io);
  else if (mp == 2)
    direct_tile<T, 2, OV, SW>(wT, ldo, x, koff, K, init, partial, io);
  else
    direct_tile<T, 1, OV, SW>(wT, ldo, x, koff, K, init, partial, io);
}

// One row segment of `count` pixels (SW apart in x, consecutive in io), in tiles of the main
// width and then 4, 2, 1.
template <class T, int SW>
void direct_row(int ov, int64_t count, const T* wT, int64_t ldo, const T* x, const int64_t* koff,
                int64_t K, const T* init, bool partial, T* io) {
  const int main = direct_pixels(ov);
  for (int64_t j = 0; j < count;) {
    const int64_t left = count - j;
    const int mp = left >= main ? main : left >= 4 ? 4 : left >= 2 ? 2 : 1;
    const T* xj = x + j * SW;
    T* o = io + j * ldo;
    switch (ov) {
      case 4:
        if constexpr (kMaxOV >= 4)
          direct_tile_mp<T, 4, SW>(mp, wT, ldo, xj, koff, K, init, partial, o);
        break;
      case 3:
        direct_tile_mp<T, 3, SW>(mp, wT, ldo, xj, koff, K, init, partial, o);
        break;
      case 2:
        direct_tile_mp<T, 2, SW>(mp, wT, ldo, xj, koff, K, init, partial, o);
        break;
      default:
        direct_tile_mp<T, 1, SW>(mp, wT, ldo, xj, koff, K, init, partial, o);
        break;
    }
    j += mp;
  }
}

// ---------------------------------------------------------------- transposes
// In-register transpose of a lanes × lanes block: r[i] holds row i on entry and column i on
// exit. Float (16 x 16): interleave 32-bit pairs of rows, then 64-bit pairs; vector s[4i + c]
// then holds, in 128-bit lane L, column 4L + c of rows 4i..4i+3, and two rounds of 128-bit
// lane shuffles gather those four row groups into each column.
#if defined(__AVX512F__)
inline void transpose(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  __m512 s[16];
  for (int i = 0; i < 4; ++i) {
    __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 1]);
    __m512d c = _mm512_castps_pd(t[4 * i + 2]), d = _mm512_castps_pd(t[4 * i + 3]);
    s[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
    s[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    s[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
    s[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
  }
  for (int c = 0; c < 4; ++c) {
    __m512 p = _mm512_shuffle_f32x4(s[c], s[4 + c], 0x88);  // lanes 0, 2 of each
    __m512 q = _mm512_shuffle_f32x4(s[c], s[4 + c], 0xDD);  // lanes 1, 3 of each
    __m512 p2 = _mm512_shuffle_f32x4(s[8 + c], s[12 + c], 0x88);
    __m512 q2 = _mm512_shuffle_f32x4(s[8 + c], s[12 + c], 0xDD);
    r[c] = _mm512_shuffle_f32x4(p, p2, 0x88);       // lane 0 of the four groups
    r[8 + c] = _mm512_shuffle_f32x4(p, p2, 0xDD);   // lane 2
    r[4 + c] = _mm512_shuffle_f32x4(q, q2, 0x88);   // lane 1
    r[12 + c] = _mm512_shuffle_f32x4(q, q2, 0xDD);  // lane 3
  }
}
// Double (8 x 8): one round of 64-bit interleaves leaves column 2L + c of rows 2i, 2i + 1 in
// lane L of t[2i + c]; the same lane shuffles finish.
inline void transpose(__m512d r[8]) {
  __m512d t[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm512_unpacklo_pd(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_pd(r[2 * i], r[2 * i + 1]);
  }
  for (int c = 0; c < 2; ++c) {
    __m512d p = _mm512_shuffle_f64x2(t[c], t[2 + c], 0x88);
    __m512d q = _mm512_shuffle_f64x2(t[c], t[2 + c], 0xDD);
    __m512d p2 = _mm512_shuffle_f64x2(t[4 + c], t[6 + c], 0x88);
    __m512d q2 = _mm512_shuffle_f64x2(t[4 + c], t[6 + c], 0xDD);
    r[c] = _mm512_shuffle_f64x2(p, p2, 0x88);
    r[4 + c] = _mm512_shuffle_f64x2(p, p2, 0xDD);
    r[2 + c] = _mm512_shuffle_f64x2(q, q2, 0x88);
    r[6 + c] = _mm512_shuffle_f64x2(q, q2, 0xDD);
  }
}
#else
// Float (8 x 8): interleave 32-bit pairs of rows, then 64-bit pairs within each 128-bit lane, so
// s[c] (c < 4) holds column c of rows 0..3 in its low lane and column 4 + c in its high lane, and
// s[4 + c] the same for rows 4..7; one 128-bit lane exchange per column pair finishes it.
inline void transpose(__m256 r[8]) {
  __m256 t[8], s[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 2; ++i) {
    s[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    s[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
    s[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    s[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
  }
  for (int c = 0; c < 4; ++c) {
    r[c] = _mm256_permute2f128_ps(s[c], s[4 + c], 0x20);      // low lanes: column c
    r[4 + c] = _mm256_permute2f128_ps(s[c], s[4 + c], 0x31);  // high lanes: column 4 + c
  }
}
// Double (4 x 4): interleave pairs of rows, then exchange 128-bit lanes.
inline void transpose(__m256d r[4]) {
  const __m256d t0 = _mm256_unpacklo_pd(r[0], r[1]), t1 = _mm256_unpackhi_pd(r[0], r[1]);
  const __m256d t2 = _mm256_unpacklo_pd(r[2], r[3]), t3 = _mm256_unpackhi_pd(r[2], r[3]);
  r[0] = _mm256_permute2f128_pd(t0, t2, 0x20);
  r[1] = _mm256_permute2f128_pd(t1, t3, 0x20);
  r[2] = _mm256_permute2f128_pd(t0, t2, 0x31);
  r[3] = _mm256_permute2f128_pd(t1, t3, 0x31);
}
#endif

}  // namespace freight::cpu::conv_tiles
#endif
