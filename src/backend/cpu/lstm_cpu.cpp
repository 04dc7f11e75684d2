// CPU kernels of the LSTM family: the fused cell (forward and backward) and the whole-sequence
// recurrences.
//
// The recurrences split the batch across threads: batch rows never interact, so each thread
// runs all T steps on its own rows (small single-threaded GEMMs against the weights, then the
// cell) with no synchronisation between steps. The per-step GEMMs are small ([B, H]·[H, 4H]);
// splitting each of them across threads inside the BLAS would cost a fork/join per step and
// repack W_hh every time, and one parallel region for the whole sequence avoids both. When the
// batch is too small to split, the steps run one after another and each step's rows are split
// over the threads instead. With AVX-512, float32 uses register-blocked GEMMs of its own that
// fuse the cell (below); float64 and other CPUs call the BLAS per step.
#include <cblas.h>
// GCC 12 reports the intentionally undefined source operand of its own AVX-512 intrinsics as
// "used uninitialized" (GCC bug 105593); the warnings point into the header, so silence them
// there.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/dispatch.h"
#include "backend/cpu/parallel.h"
#include "backend/cpu/sgemm_call.h"
#include "backend/cpu/vec_math.h"
#include "ops/kernels/lstm.h"

namespace freight::cpu {
namespace {

// float: the vectorisable approximations; double: libm.
template <class T>
inline T sigmoid_of(T x) {
  if constexpr (std::is_same_v<T, float>)
    return vsigmoid(x);
  else
    return 1.0 / (1.0 + std::exp(-x));
}
template <class T>
inline T tanh_of(T x) {
  if constexpr (std::is_same_v<T, float>)
    return vtanh(x);
  else
    return std::tanh(x);
}

// Row-major C[m, n] = A[m, k]·op(B) + beta·C, op(B) = B [k, n] or Bᵀ for B [n, k].
template <class T>
void gemm_rows(int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b, bool tb,
               int64_t ldb, T beta, T* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if constexpr (std::is_same_v<T, float>)
    sgemm(false, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
  else
    cblas_dgemm(CblasRowMajor, CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(m), int(n), int(k),
                1.0, a, int(lda), b, int(ldb), beta, c, int(ldc));
}

// Forward cell over rows [r0, r1) of one step. a [B, 4H] holds the pre-activations (without
// the bias) and receives the activations i, f, g, o; then
//   c = f⊙c_prev + i⊙g,   h = o⊙tanh(c).
// h is also written to out + r·out_ld when out is given (the batch-first output).
template <class T>
void cell_forward_rows(T* a_all, const T* bias, const T* c_prev, T* c, T* h, T* out, int64_t out_ld,
                       int64_t r0, int64_t r1, int64_t H) {
  for (int64_t r = r0; r < r1; ++r) {
    T* a = a_all + r * 4 * H;
    const T* cp = c_prev + r * H;
    T* cr = c + r * H;
    T* hr = h + r * H;
#pragma omp simd
    for (int64_t j = 0; j < H; ++j) {
      T i = sigmoid_of<T>(a[j] + bias[j]);
      T f = sigmoid_of<T>(a[H + j] + bias[H + j]);
      T g = tanh_of<T>(a[2 * H + j] + bias[2 * H + j]);
      T o = sigmoid_of<T>(a[3 * H + j] + bias[3 * H + j]);
      T cn = f * cp[j] + i * g;
      a[j] = i;
      a[H + j] = f;
      a[2 * H + j] = g;
      a[3 * H + j] = o;
      cr[j] = cn;
      hr[j] = o * tanh_of<T>(cn);
    }
    if (out) std::copy(hr, hr + H, out + r * out_ld);
  }
}

// Backward cell over rows [r0, r1) of one step. With dh = dh_out + dh_next and τ = tanh(c)
// (recomputed rather than stored):
//   dc_total = dc + dh⊙o⊙(1 − τ²)        (c reaches the loss through h and through c_next)
//   d(pre-act) of i = dc_total⊙g⊙i(1 − i),   of f = dc_total⊙c_prev⊙f(1 − f),
//              of g = dc_total⊙i⊙(1 − g²),   of o = dh⊙τ⊙o(1 − o)
//   dc_prev = dc_total⊙f   (written over dc).
// Row r of dh_out is at dh_out + r·dh_out_ld; that of d(pre-act) at da_rows + (r − r0)·da_ld
// (the row range's own block). When db is given, the rows of d(pre-act) are
// also added into it (the bias gradient is their sum over batch and steps).
template <class T>
void cell_backward_rows(const T* a_all, const T* c_prev, const T* c, const T* dh_out,
                        int64_t dh_out_ld, const T* dh_next, T* dc, T* da_rows, int64_t da_ld,
                        T* db, int64_t r0, int64_t r1, int64_t H) {
  for (int64_t r = r0; r < r1; ++r) {
    const T* a = a_all + r * 4 * H;
    T* da = da_rows + (r - r0) * da_ld;
    const T* cp = c_prev + r * H;
    const T* cr = c + r * H;
    const T* ho = dh_out + r * dh_out_ld;
    const T* hn = dh_next + r * H;
    T* dcr = dc + r * H;
#pragma omp simd
    for (int64_t j = 0; j < H; ++j) {
      T i = a[j], f = a[H + j], g = a[2 * H + j], o = a[3 * H + j];
      T tc = tanh_of<T>(cr[j]);
      T dh = ho[j] + hn[j];
      T dct = dcr[j] + dh * o * (T(1) - tc * tc);
      da[j] = dct * g * i * (T(1) - i);
      da[H + j] = dct * cp[j] * f * (T(1) - f);
      da[2 * H + j] = dct * i * (T(1) - g * g);
      da[3 * H + j] = dh * tc * o * (T(1) - o);
      dcr[j] = dct * f;
    }
    if (db) {
#pragma omp simd
      for (int64_t j = 0; j < 4 * H; ++j) db[j] += da[j];
    }
  }
}

// Rows of hidden units per chunk when the cell kernels run on their own (each unit costs a few
// transcendental functions, so chunks are smaller than for plain elementwise loops).
int64_t cell_grain_rows(int64_t H) {
  return std::max<int64_t>(1, 8192 / std::max<int64_t>(H, 1));
}

// Scratch memory from the device's caching allocator (a std::vector of this size would be
// fresh pages, and page faults, at every call).
Tensor workspace(int64_t n, DType dtype = DType::F32) {
  return Tensor::empty({n}, dtype, Device::cpu());
}

// [dW_ih | dW_hh] = dAᵀ·[x_t | h_{t-1}] over all rows (t, b) with the BLAS: one GEMM on a
// time-major copy of the rows [x_t | h_{t-1}] (one long GEMM runs much closer to peak than two
// thin ones; I is often small), into [G, I + H], whose rows split into the two gradients by
// contiguous copies. (The product used to be formed transposed, [I + H, G], and transposed
// back element by element: a read 4H floats apart for each element, which at batch 1 took
// longer than the GEMM.) x [B, T, I]; hs [T+1, B, H]; dA row (t, b) at da + (t·B + b)·ld.
// dw_ih [4H, I] and dw_hh [4H, H] are written when not null.
template <class T_>
void weight_grads_blas(const T_* x, const T_* hs, const T_* da, int64_t ld, int64_t T, int64_t B,
                       int64_t I, int64_t H, T_* dw_ih, T_* dw_hh) {
  if (!dw_ih && !dw_hh) return;
  const int64_t K = I + H, G = 4 * H;
  const DType dt = std::is_same_v<T_, float> ? DType::F32 : DType::F64;
  Tensor xh_buf = workspace(T * B * K, dt), dw_buf = workspace(G * K, dt);
  T_* xh = xh_buf.data<T_>();
  T_* dw = dw_buf.data<T_>();
  parallel_for(T * B, 64, [&](int64_t q0, int64_t q1) {
    for (int64_t q = q0; q < q1; ++q) {  // row q = t·B + b
      int64_t t = q / B, b = q % B;
      std::copy(x + (b * T + t) * I, x + (b * T + t + 1) * I, xh + q * K);
      std::copy(hs + q * H, hs + (q + 1) * H, xh + q * K + I);
    }
  });
  if constexpr (std::is_same_v<T_, float>)
    sgemm(true, false, G, K, T * B, 1.0f, da, ld, xh, K, 0.0f, dw, K);
  else
    cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(G), int(K), int(T * B), 1.0, da,
                int(ld), xh, int(K), 0.0, dw, int(K));
  for (int64_t n = 0; n < G; ++n) {
    if (dw_ih) std::copy(dw + n * K, dw + n * K + I, dw_ih + n * I);
    if (dw_hh) std::copy(dw + n * K + I, dw + (n + 1) * K, dw_hh + n * H);
  }
}

// Fewest batch rows worth giving a thread of its own in the sequence kernels: below this the
// per-thread GEMMs get too thin for the BLAS micro-kernels (they work on blocks of rows).
constexpr int64_t kMinRowsPerThread = 8;

int batch_threads(int64_t B) {
  int max_threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  return int(std::clamp<int64_t>(B / kMinRowsPerThread, 1, max_threads));
}

// Runs fn(r0, r1) over the batch split in `nt` contiguous shards, one per thread.
template <class Fn>
void over_batch_shards(int nt, int64_t B, Fn&& fn) {
  if (nt <= 1) {
    fn(int64_t(0), B);
    return;
  }
#pragma omp parallel num_threads(nt)
  {
    int64_t k = omp_get_thread_num(), n = omp_get_num_threads();
    int64_t r0 = B * k / n, r1 = B * (k + 1) / n;
    if (r0 < r1) fn(r0, r1);
  }
}

// ---------------------------------------------------------------- cell slots
void cell_forward_cpu(Tensor& gates, const Tensor& bias, const Tensor& c_prev, Tensor& c,
                      Tensor& h) {
  int64_t B = gates.size(0), H = gates.size(1) / 4;
  dispatch_floating(gates.dtype(), "lstm_cell_forward", [&](auto tag) {
    using T = decltype(tag);
    T* a = static_cast<T*>(gates.data_ptr());
    const T* b = static_cast<const T*>(bias.data_ptr());
    const T* cp = static_cast<const T*>(c_prev.data_ptr());
    T* cn = static_cast<T*>(c.data_ptr());
    T* hn = static_cast<T*>(h.data_ptr());
    parallel_for(B, cell_grain_rows(H), [&](int64_t r0, int64_t r1) {
      cell_forward_rows<T>(a, b, cp, cn, hn, nullptr, 0, r0, r1, H);
    });
  });
}

void cell_backward_cpu(const Tensor& gates, const Tensor& c_prev, const Tensor& c,
                       const Tensor& dh_out, const Tensor& dh_next, Tensor& dc, Tensor& dgates) {
  int64_t B = gates.size(0), H = gates.size(1) / 4;
  dispatch_floating(gates.dtype(), "lstm_cell_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* a = static_cast<const T*>(gates.data_ptr());
    const T* cp = static_cast<const T*>(c_prev.data_ptr());
    const T* cn = static_cast<const T*>(c.data_ptr());
    const T* ho = static_cast<const T*>(dh_out.data_ptr());
    const T* hn = static_cast<const T*>(dh_next.data_ptr());
    T* dcp = static_cast<T*>(dc.data_ptr());
    T* da = static_cast<T*>(dgates.data_ptr());
    parallel_for(B, cell_grain_rows(H), [&](int64_t r0, int64_t r1) {
      cell_backward_rows<T>(a, cp, cn, ho, H, hn, dcp, da + r0 * 4 * H, 4 * H, nullptr, r0, r1, H);
    });
  });
}

// ---------------------------------------------------------------- AVX-512 float recurrences
// The per-step GEMMs are small, and a BLAS call repacks W_hh at every step and cannot fuse the
// cell into its epilogue. With AVX-512 the float recurrences use their own register-blocked
// GEMMs instead, with W_hh packed once per sequence:
//  * forward: [W_hh | W_ih] is packed so that one 64-column panel holds the i, f, g and o rows
//    of 16 consecutive hidden units (one zmm register per gate). A tile of up to 6 batch rows ×
//    one panel accumulates h_{t-1}·W_hhᵀ + x_t·W_ihᵀ (x read straight from the batch-first
//    input, so no separate projection pass writes and rereads a [T, B, 4H] buffer) and ends
//    with everything the cell needs for those 6×16 units in 24 registers: the cell runs on them
//    directly, and the pre-activations never go to memory.
#if defined(__AVX512F__)
namespace avx512 {

constexpr int64_t kUnits = 16;               // hidden units per forward panel (one zmm per gate)
constexpr int kRowsFwd = 6;                  // batch rows per forward tile: 6 × 4 accumulators
constexpr int64_t kStreamBytes = 128 << 10;  // per thread and step; measured, see sequence_forward
constexpr int64_t kRowBlock = 24;            // batch rows per block: their h_prev stays in L1

// exp as vexp in vec_math.h: 2^n · p(r), n = round(x / ln 2), |r| <= ln 2 / 2, degree-6 Taylor.
// The clamp keeps a NaN (max/min return their second operand when either is NaN): the NaN goes
// on through p(r), so sigmoid and tanh of a NaN are NaN and a NaN in the input reaches h and c
// from its step on, as in PyTorch. (With x as the first operand the clamp made it -87: sigmoid
// gave 1, tanh ±1, and the sequence went on as if the NaN were a large number.)
inline __m512 exp_ps(__m512 x) {
  x = _mm512_min_ps(_mm512_set1_ps(88.0f), _mm512_max_ps(_mm512_set1_ps(-87.0f), x));
  __m512 n = _mm512_roundscale_ps(
      _mm512_fmadd_ps(x, _mm512_set1_ps(1.44269504088896341f), _mm512_set1_ps(0.5f)),
      _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fmadd_ps(n, _mm512_set1_ps(2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.0f / 720.0f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  __m512i bits =
      _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  return _mm512_mul_ps(p, _mm512_castsi512_ps(bits));
}

// 1/d from the 14-bit hardware estimate and one Newton step r·(2 − d·r) (about 1 ulp), much
// cheaper than a division.
inline __m512 rcp_ps(__m512 d) {
  __m512 r = _mm512_rcp14_ps(d);
  return _mm512_mul_ps(r, _mm512_fnmadd_ps(d, r, _mm512_set1_ps(2.0f)));
}

inline __m512 sigmoid_ps(__m512 x) {
  return rcp_ps(_mm512_add_ps(_mm512_set1_ps(1.0f), exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), x))));
}

// tanh as vtanh in vec_math.h: odd Taylor series for |x| < 0.25, else 1 − 2/(e^{2|x|} + 1)
// with the sign restored.
inline __m512 tanh_ps(__m512 x) {
  __m512 sign = _mm512_castsi512_ps(
      _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(int32_t(0x80000000u))));
  __m512 a = _mm512_castsi512_ps(
      _mm512_andnot_si512(_mm512_set1_epi32(int32_t(0x80000000u)), _mm512_castps_si512(x)));
  __m512 x2 = _mm512_mul_ps(x, x);
  __m512 s = _mm512_set1_ps(62.0f / 2835);
  s = _mm512_fmadd_ps(s, x2, _mm512_set1_ps(-17.0f / 315));
  s = _mm512_fmadd_ps(s, x2, _mm512_set1_ps(2.0f / 15));
  s = _mm512_fmadd_ps(s, x2, _mm512_set1_ps(-1.0f / 3));
  s = _mm512_fmadd_ps(s, x2, _mm512_set1_ps(1.0f));
  s = _mm512_mul_ps(s, x);
  __m512 e = exp_ps(_mm512_add_ps(a, a));
  __m512 big = _mm512_fnmadd_ps(
      _mm512_set1_ps(2.0f), rcp_ps(_mm512_add_ps(e, _mm512_set1_ps(1.0f))), _mm512_set1_ps(1.0f));
  big = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(big), _mm512_castps_si512(sign)));
  __mmask16 small = _mm512_cmp_ps_mask(a, _mm512_set1_ps(0.25f), _CMP_LT_OQ);
  return _mm512_mask_blend_ps(small, big, s);
}

// [W_hh | W_ih] -> panels [ceil(H/16)][H + I][64]: panel u, row k holds W[q·H + 16u + l, k] at
// q·16 + l (gate q, unit 16u + l), with W = [W_hh | W_ih] ([4H, H + I]: the h columns first);
// units past H are zero.
void pack_forward(const float* w_hh, const float* w_ih, int64_t H, int64_t I, float* wp) {
  int64_t panels = (H + kUnits - 1) / kUnits, K = H + I;
  for (int64_t u = 0; u < panels; ++u)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t q = 0; q < 4; ++q)
        for (int64_t l = 0; l < kUnits; ++l) {
          int64_t j = u * kUnits + l, row = q * H + j;
          float v = 0.0f;
          if (j < H) v = k < H ? w_hh[row * H + k] : w_ih[row * I + (k - H)];
          wp[((u * K + k) * 4 + q) * kUnits + l] = v;
        }
}

// Everything one forward step of a tile needs.
struct FwdStep {
  int64_t H, I, T, t;   // I: the input width fused into the tiles (0: projections given)
  const float* wp;      // packed [W_hh | W_ih] (or W_hh alone when I = 0)
  const float* bias;    // [4H]
  const float* x;       // [B, T, I] when I > 0
  const float* xproj;   // [B, T, 4H]: x·W_ihᵀ, when I = 0
  const float* h_prev;  // [B, H] (null: zeros)
  const float* c_prev;  // [B, H]
  float* gates;         // [B, 4H] out: activations
  float* c;             // [B, H]
  float* h;             // [B, H]
  float* out;           // [B, T, H]
  bool stream;          // store the activations with non-temporal stores (see sequence_forward)
};

// acc[r][·] += a[r·lda + k]·b[k][·] for k in [0, K): rows of A against a 64-column panel.
template <int MR>
inline void panel_fma(__m512 (&acc)[MR][4], const float* a, int64_t lda, const float* b,
                      int64_t K) {
  for (int64_t k = 0; k < K; ++k, b += 4 * kUnits) {
    __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
    __m512 b2 = _mm512_loadu_ps(b + 32), b3 = _mm512_loadu_ps(b + 48);
    for (int r = 0; r < MR; ++r) {
      __m512 ar = _mm512_set1_ps(a[r * lda + k]);
      acc[r][0] = _mm512_fmadd_ps(ar, b0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(ar, b1, acc[r][1]);
      acc[r][2] = _mm512_fmadd_ps(ar, b2, acc[r][2]);
      acc[r][3] = _mm512_fmadd_ps(ar, b3, acc[r][3]);
    }
  }
}

// Rows [r0, r0 + MR) × units [16u, 16u + 16): the pre-activations h_prev·W_hhᵀ + x_t·W_ihᵀ
// into registers, then the cell on them.
template <int MR>
void forward_tile(const FwdStep& s, int64_t r0, int64_t u) {
  const int64_t H = s.H, I = s.I, j0 = u * kUnits;
  __m512 acc[MR][4];
  for (int r = 0; r < MR; ++r)
    for (int q = 0; q < 4; ++q) acc[r][q] = _mm512_setzero_ps();
  const float* panel = s.wp + u * (H + I) * 4 * kUnits;
  if (s.h_prev) panel_fma<MR>(acc, s.h_prev + r0 * H, H, panel, H);
  if (I > 0) panel_fma<MR>(acc, s.x + r0 * s.T * I + s.t * I, s.T * I, panel + H * 4 * kUnits, I);
  __mmask16 m = H - j0 >= kUnits ? __mmask16(0xFFFF) : __mmask16((1u << (H - j0)) - 1);
  for (int r = 0; r < MR; ++r) {
    int64_t row = r0 + r;
    float* g = s.gates + row * 4 * H + j0;
    __m512 pre[4];
    for (int q = 0; q < 4; ++q)
      pre[q] = _mm512_add_ps(acc[r][q], _mm512_maskz_loadu_ps(m, s.bias + q * H + j0));
    if (s.xproj) {
      const float* xp = s.xproj + (row * s.T + s.t) * 4 * H + j0;
      for (int q = 0; q < 4; ++q)
        pre[q] = _mm512_add_ps(pre[q], _mm512_maskz_loadu_ps(m, xp + q * H));
    }
    __m512 i = sigmoid_ps(pre[0]), f = sigmoid_ps(pre[1]);
    __m512 gg = tanh_ps(pre[2]), o = sigmoid_ps(pre[3]);
    __m512 cp = _mm512_maskz_loadu_ps(m, s.c_prev + row * H + j0);
    __m512 c = _mm512_fmadd_ps(f, cp, _mm512_mul_ps(i, gg));
    __m512 h = _mm512_mul_ps(o, tanh_ps(c));
    if (s.stream) {
      _mm512_stream_ps(g, i);
      _mm512_stream_ps(g + H, f);
      _mm512_stream_ps(g + 2 * H, gg);
      _mm512_stream_ps(g + 3 * H, o);
    } else {
      _mm512_mask_storeu_ps(g, m, i);
      _mm512_mask_storeu_ps(g + H, m, f);
      _mm512_mask_storeu_ps(g + 2 * H, m, gg);
      _mm512_mask_storeu_ps(g + 3 * H, m, o);
    }
    _mm512_mask_storeu_ps(s.c + row * H + j0, m, c);
    _mm512_mask_storeu_ps(s.h + row * H + j0, m, h);
    _mm512_mask_storeu_ps(s.out + row * s.T * H + s.t * H + j0, m, h);
  }
}

// A tile of `mr` <= MR rows (the compile-time row count picks the register blocking).
template <int MR>
void forward_tile_any(int mr, const FwdStep& s, int64_t r0, int64_t u) {
  if constexpr (MR > 0) {
    if (mr == MR) return forward_tile<MR>(s, r0, u);
    return forward_tile_any<MR - 1>(mr, s, r0, u);
  }
}

// One forward step on rows [r0, r1), in blocks of rows whose operands stay in L1 while every
// panel passes over them (a panel is reused by all the tiles of a block).
void forward_step_rows(const FwdStep& s, int64_t r0, int64_t r1) {
  int64_t panels = (s.H + kUnits - 1) / kUnits;
  for (int64_t b0 = r0; b0 < r1; b0 += kRowBlock) {
    int64_t b1 = std::min(r1, b0 + kRowBlock);
    for (int64_t u = 0; u < panels; ++u)
      for (int64_t r = b0; r < b1; r += kRowsFwd)
        forward_tile_any<kRowsFwd>(int(std::min<int64_t>(kRowsFwd, b1 - r)), s, r, u);
  }
}

void sequence_forward(const float* x, const float* w_ih, const float* w_hh, const float* bias,
                      float* a, float* h, float* c, float* out, int64_t T, int64_t B, int64_t I,
                      int64_t H, bool h0_zero) {
  // A narrow input is fused into the tiles (the extra I steps of each dot product cost less than
  // a separate projection pass over a [T, B, 4H] buffer); a wide one is projected up front by
  // one large BLAS GEMM, which runs closer to peak than the tiles (measured: I = 28, H = 128
  // fused is faster; I = H = 256 separate is).
  const int64_t fused_i = 2 * I <= H ? I : 0;
  Tensor xproj_buf;
  if (fused_i == 0) {
    xproj_buf = workspace(B * T * 4 * H);
    sgemm(false, true, B * T, 4 * H, I, 1.0f, x, I, w_ih, I, 0.0f, xproj_buf.data<float>(), 4 * H);
  }
  int64_t panels = (H + kUnits - 1) / kUnits;
  Tensor wp = workspace(panels * (H + fused_i) * 4 * kUnits);
  pack_forward(w_hh, w_ih, H, fused_i, wp.data<float>());
  const int64_t ga = B * 4 * H, gh = B * H;
  int nt = batch_threads(B);
  // The activations are written once and read again only by the backward pass. When one step
  // of one thread writes a large part of its L2, ordinary stores evict the packed weights and
  // pay a read for ownership per line: stream them to memory instead. (Streaming needs 64-byte
  // aligned rows, hence H % 16 == 0 and an aligned buffer.)
  const bool stream = H % kUnits == 0 && reinterpret_cast<uintptr_t>(a) % 64 == 0 &&
                      (B / nt) * 4 * H * int64_t(sizeof(float)) >= kStreamBytes;
  auto make = [&](int64_t t) {
    return FwdStep{.H = H,
                   .I = fused_i,
                   .T = T,
                   .t = t,
                   .wp = wp.data<float>(),
                   .bias = bias,
                   .x = x,
                   .xproj = fused_i ? nullptr : xproj_buf.data<float>(),
                   .h_prev = (t == 0 && h0_zero) ? nullptr : h + t * gh,
                   .c_prev = c + t * gh,
                   .gates = a + t * ga,
                   .c = c + (t + 1) * gh,
                   .h = h + (t + 1) * gh,
                   .out = out,
                   .stream = stream};
  };
  // Every thread runs all steps on its rows; with one thread the rows of a step are split over
  // the pool instead (a fork/join per step).
  if (nt > 1) {
    over_batch_shards(nt, B, [&](int64_t r0, int64_t r1) {
      for (int64_t t = 0; t < T; ++t) forward_step_rows(make(t), r0, r1);
      if (stream) _mm_sfence();  // streamed stores are weakly ordered: publish them
    });
    return;
  }
  for (int64_t t = 0; t < T; ++t) {
    FwdStep s = make(t);
    parallel_for(B, kRowsFwd, [&](int64_t r0, int64_t r1) {
      forward_step_rows(s, r0, r1);
      if (stream) _mm_sfence();
    });
  }
}

// Backward, per step and per thread on its rows, in tiles of up to 12 rows:
//   the cell backward gives dA_t for the tile's rows (kept in a per-thread scratch),
//   dh_{t-1} = dA_t·W_hh and dx_t = dA_t·W_ih for those rows while they are in L1
//   (W_hh and W_ih packed in panels of 32 columns: 12 rows × 2 zmm accumulators);
// then, over all the thread's rows of the step, the weight gradients are accumulated into
// thread-private transposed partial sums, dW_hhᵀ += h_{t-1}ᵀ·dA_t and dW_ihᵀ += x_tᵀ·dA_t, while
// dA_t is still in cache. dA is never written to memory as a whole.
constexpr int64_t kCols = 32;              // output columns per backward panel (two zmm)
constexpr int kRowsBwd = 12;               // rows per backward tile: 12 × 2 accumulators
constexpr int64_t kChunkRows = 128;        // rows per weight-gradient accumulation (see below)
constexpr int64_t kMaxChunk = 64;          // steps per accumulation at most
constexpr int64_t kInLoopBytes = 1 << 20;  // partial weight gradients accumulated in the loop

// Masks for the two zmm of a 32-column panel starting `left` columns before the end.
inline void panel_masks(int64_t left, __mmask16& m0, __mmask16& m1) {
  m0 = left >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1);
  m1 = left >= 32 ? __mmask16(0xFFFF)
                  : (left <= 16 ? __mmask16(0) : __mmask16((1u << (left - 16)) - 1));
}

// W [K, N] (row-major) -> panels [ceil(N/32)][K][32]: panel v, row k holds W[k, 32v + l] at l;
// columns past N are zero.
void pack_columns(const float* w, int64_t K, int64_t N, float* wp) {
  int64_t panels = (N + kCols - 1) / kCols;
  for (int64_t v = 0; v < panels; ++v)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t l = 0; l < kCols; ++l) {
        int64_t j = v * kCols + l;
        wp[(v * K + k) * kCols + l] = j < N ? w[k * N + j] : 0.0f;
      }
}

// dst[r·ld + j] = Σ_k a[r·lda + k]·W[k, j] for r < MR, j < N (W packed by pack_columns).
template <int MR>
void rows_times_packed(const float* a, int64_t lda, int64_t K, const float* wp, int64_t N,
                       float* dst, int64_t ld) {
  const int64_t panels = (N + kCols - 1) / kCols;
  for (int64_t v = 0; v < panels; ++v) {
    __m512 acc[MR][2];
    for (int r = 0; r < MR; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    const float* b = wp + v * K * kCols;
    for (int64_t k = 0; k < K; ++k, b += kCols) {
      __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
      for (int r = 0; r < MR; ++r) {
        __m512 ar = _mm512_set1_ps(a[r * lda + k]);
        acc[r][0] = _mm512_fmadd_ps(ar, b0, acc[r][0]);
        acc[r][1] = _mm512_fmadd_ps(ar, b1, acc[r][1]);
      }
    }
    __mmask16 m0, m1;
    panel_masks(N - v * kCols, m0, m1);
    for (int r = 0; r < MR; ++r) {
      float* d = dst + r * ld + v * kCols;
      _mm512_mask_storeu_ps(d, m0, acc[r][0]);
      _mm512_mask_storeu_ps(d + 16, m1, acc[r][1]);
    }
  }
}

// One step's share of a chunk of rows for the weight-gradient accumulation: rows r < `rows` of
// the source (x_t or h_{t-1}) at src + r·lds, of dA_t at da + r·ld_da.
struct ChunkStep {
  const float* src;
  int64_t lds;
  const float* da;
};

// acc[i][·] += Σ_{r < rows} src[r·lds + i]·da[r·ld_da + ·] over the 32 columns of da
// (k0, k1 mask the columns past the end).
template <int MR>
inline void outer_products(__m512 (&acc)[MR][2], const float* src, int64_t lds, const float* da,
                           int64_t ld_da, int64_t rows, __mmask16 k0, __mmask16 k1) {
  for (int64_t r = 0; r < rows; ++r) {
    __m512 b0 = _mm512_maskz_loadu_ps(k0, da + r * ld_da);
    __m512 b1 = _mm512_maskz_loadu_ps(k1, da + r * ld_da + 16);
    for (int i = 0; i < MR; ++i) {
      __m512 ai = _mm512_set1_ps(src[r * lds + i]);
      acc[i][0] = _mm512_fmadd_ps(ai, b0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(ai, b1, acc[i][1]);
    }
  }
}

// part[m, n] += Σ_steps Σ_{r < rows} src[r·lds + m]·da[r·ld_da + n] for m in [m0, m0 + MR) and
// the 32 columns n0 + [0, 32) ∩ [0, G): one register tile of a transposed weight gradient. The
// partial sums are stored panel by panel ([G/32][M][32]) so that a tile is one contiguous block.
template <int MR>
void accumulate_tile(const ChunkStep* steps, int nsteps, int64_t rows, int64_t ld_da, int64_t G,
                     float* panel, int64_t m0, int64_t n0) {
  __mmask16 k0, k1;
  panel_masks(G - n0, k0, k1);
  float* c = panel + m0 * kCols;
  // One load and store of the tile per step: keeping it in registers across steps makes GCC
  // spill the accumulators inside the inner loop.
  for (int k = 0; k < nsteps; ++k) {
    __m512 acc[MR][2];
    for (int i = 0; i < MR; ++i) {
      acc[i][0] = _mm512_loadu_ps(c + i * kCols);
      acc[i][1] = _mm512_loadu_ps(c + i * kCols + 16);
    }
    outer_products<MR>(acc, steps[k].src + m0, steps[k].lds, steps[k].da + n0, ld_da, rows, k0, k1);
    for (int i = 0; i < MR; ++i) {
      _mm512_storeu_ps(c + i * kCols, acc[i][0]);
      _mm512_storeu_ps(c + i * kCols + 16, acc[i][1]);
    }
  }
}

// Runs Fn<MR> for the compile-time MR equal to mr (1 <= mr <= kRowsBwd).
template <int MR, class Fn>
void with_rows(int mr, Fn&& fn) {
  if constexpr (MR > 0) {
    if (mr == MR) return fn(std::integral_constant<int, MR>{});
    return with_rows<MR - 1>(mr, fn);
  }
}

// part (panel layout, M rows) += Σ_steps srcᵀ·dA over `rows` rows per step.
void accumulate_transposed(const ChunkStep* steps, int nsteps, int64_t rows, int64_t ld_da,
                           int64_t M, int64_t G, float* part) {
  for (int64_t n0 = 0; n0 < G; n0 += kCols)
    for (int64_t m0 = 0; m0 < M; m0 += kRowsBwd)
      with_rows<kRowsBwd>(int(std::min<int64_t>(kRowsBwd, M - m0)), [&](auto mr) {
        accumulate_tile<decltype(mr)::value>(steps, nsteps, rows, ld_da, G,
                                             part + (n0 / kCols) * M * kCols, m0, n0);
      });
}

// Everything one backward step needs (pointers to whole-batch arrays).
struct BwdStep {
  int64_t H, I, T, t;
  const float* wp_h;    // packed W_hh (null: dh_{t-1} not needed)
  const float* wp_x;    // packed W_ih (null: dx not needed)
  const float* gates;   // [B, 4H] activations
  const float* c_prev;  // [B, H]
  const float* c;       // [B, H]
  const float* dout;    // [B, T, H]
  float* dh;            // [B, H]: dh_t in, dh_{t-1} out
  float* dc;            // [B, H]
  float* dx;            // [B, T, I] or null
};

// One step on rows [r0, r1), tile by tile: the cell (dA rows into da, ld_da apart), then
// dh_{t-1} and dx_t of the same rows.
void backward_step_rows(const BwdStep& s, float* da_rows, int64_t ld_da, float* db, int64_t r0,
                        int64_t r1) {
  const int64_t H = s.H, I = s.I, G = 4 * H;
  for (int64_t r = r0; r < r1; r += kRowsBwd) {
    int mr = int(std::min<int64_t>(kRowsBwd, r1 - r));
    float* da = da_rows + (r - r0) * ld_da;
    cell_backward_rows<float>(s.gates, s.c_prev, s.c, s.dout + s.t * H, s.T * H, s.dh, s.dc, da,
                              ld_da, db, r, r + mr, H);
    with_rows<kRowsBwd>(mr, [&](auto m) {
      constexpr int MR = decltype(m)::value;
      if (s.wp_h) rows_times_packed<MR>(da, ld_da, G, s.wp_h, H, s.dh + r * H, H);
      if (s.wp_x)
        rows_times_packed<MR>(da, ld_da, G, s.wp_x, I, s.dx + r * s.T * I + s.t * I, s.T * I);
    });
  }
}

void sequence_backward(const float* x, const float* w_ih, const float* w_hh, const float* a,
                       const float* h, const float* c, const float* dout, float* dh, float* dc,
                       bool need_dh0, float* dx, float* dw_ih, float* dw_hh, float* db, int64_t T,
                       int64_t B, int64_t I, int64_t H) {
  const int64_t G = 4 * H, ga = B * G, gh = B * H;
  Tensor wph = workspace(((H + kCols - 1) / kCols) * G * kCols);
  pack_columns(w_hh, G, H, wph.data<float>());
  Tensor wpx;
  if (dx) {
    wpx = workspace(((I + kCols - 1) / kCols) * G * kCols);
    pack_columns(w_ih, G, I, wpx.data<float>());
  }
  // Threads own either a batch shard for the whole sequence or, when the batch is too small to
  // split, a share of every step's rows (the same share at every step).
  const int nt = batch_threads(B);
  // Otherwise parallel_for below splits each step's B rows into at most this many parts (one
  // at batch 1): each part zero-fills and finally reduces its own copy of the weight
  // gradients, so a part too many costs a whole extra pass over them.
  const int parts = nt > 1 ? nt
                           : int(std::clamp<int64_t>((B + kRowsBwd - 1) / kRowsBwd, 1,
                                                     std::max(1, omp_get_max_threads())));
  const int64_t max_rows = nt > 1 ? (B + nt - 1) / nt : B;
  // dA rows are kept ld_da apart: a power-of-two stride (4H) would map the rows of a column block
  // onto a few L1 sets.
  const int64_t ld_da = G + 16, gpad = (G + kCols - 1) / kCols * kCols;
  // When a thread's partial sums of the weight gradients fit in half its L2, they are
  // accumulated in the loop, every `chunk` steps over at least kChunkRows rows (so that moving
  // the partial sums is paid for by enough multiply-adds). Otherwise dA is kept for every step
  // and one BLAS GEMM after the loop gives the weight gradients.
  const bool in_loop = (dw_ih || dw_hh) && (I + H) * gpad * 4 <= kInLoopBytes;
  const int64_t chunk =
      std::clamp<int64_t>((kChunkRows + max_rows - 1) / max_rows, 1, std::min(T, kMaxChunk));
  const int64_t da_size = in_loop ? chunk * max_rows * ld_da : 0;
  const int64_t acc_size =
      gpad + (in_loop && dw_ih ? I * gpad : 0) + (in_loop && dw_hh ? H * gpad : 0);
  Tensor scratch = workspace(parts * (da_size + acc_size));
  Tensor da_all = in_loop ? Tensor() : workspace(T * B * ld_da);
  // Raw pointers, taken once: the reductions below call acc_of for every element, and
  // Tensor::data checks the dtype and device each time.
  float* const scratch_p = scratch.data<float>();
  float* const da_all_p = in_loop ? nullptr : da_all.data<float>();
  const float* const wph_p = wph.data<float>();
  const float* const wpx_p = dx ? wpx.data<float>() : nullptr;
  auto da_of = [&](int k) { return scratch_p + k * (da_size + acc_size); };
  auto acc_of = [&](int k) { return da_of(k) + da_size; };  // db, then dW_ihᵀ, then dW_hhᵀ
  for (int k = 0; k < parts; ++k) std::fill(acc_of(k), acc_of(k) + acc_size, 0.0f);
  auto make = [&](int64_t t) {
    return BwdStep{.H = H,
                   .I = I,
                   .T = T,
                   .t = t,
                   .wp_h = (t > 0 || need_dh0) ? wph_p : nullptr,
                   .wp_x = wpx_p,
                   .gates = a + t * ga,
                   .c_prev = c + t * gh,
                   .c = c + (t + 1) * gh,
                   .dout = dout,
                   .dh = dh,
                   .dc = dc,
                   .dx = dx};
  };
  // Step t on rows [r0, r1) by thread k; after the last step of a chunk (steps t .. t_hi), the
  // weight gradients of the chunk.
  auto run = [&](int k, int64_t t, int64_t r0, int64_t r1) {
    int64_t slot = (T - 1 - t) % chunk;
    float* da = in_loop ? da_of(k) + slot * max_rows * ld_da : da_all_p + (t * B + r0) * ld_da;
    float* acc = acc_of(k);
    backward_step_rows(make(t), da, ld_da, acc, r0, r1);
    if (!in_loop || (slot != chunk - 1 && t != 0)) return;
    int n = int(slot + 1);
    ChunkStep xs[kMaxChunk], hs_[kMaxChunk];
    for (int q = 0; q < n; ++q) {  // slot q holds step t + slot − q
      int64_t tq = t + slot - q;
      const float* daq = da_of(k) + q * max_rows * ld_da;
      xs[q] = {x + r0 * T * I + tq * I, T * I, daq};
      hs_[q] = {h + tq * gh + r0 * H, H, daq};
    }
    if (dw_ih) accumulate_transposed(xs, n, r1 - r0, ld_da, I, G, acc + gpad);
    if (dw_hh)
      accumulate_transposed(hs_, n, r1 - r0, ld_da, H, G, acc + gpad + (dw_ih ? I * gpad : 0));
  };
  if (nt > 1) {
    over_batch_shards(nt, B, [&](int64_t r0, int64_t r1) {
      for (int64_t t = T - 1; t >= 0; --t) run(omp_get_thread_num(), t, r0, r1);
    });
  } else {
    for (int64_t t = T - 1; t >= 0; --t)
      parallel_for(B, kRowsBwd, [&](int64_t r0, int64_t r1) {
        // One part: the loop ran inline, perhaps inside a caller's parallel region, whose
        // thread numbers are not ours.
        run(parts > 1 && omp_in_parallel() ? omp_get_thread_num() : 0, t, r0, r1);
      });
  }
  // Add up the threads' partial sums; the weight gradients are transposed on the way.
  for (int64_t n = 0; db && n < G; ++n) {
    float sum = 0;
    for (int k = 0; k < parts; ++k) sum += acc_of(k)[n];
    db[n] = sum;
  }
  auto reduce_transposed = [&](int64_t offset, int64_t M, float* dst) {
    for (int64_t n = 0; n < G; ++n)
      for (int64_t m = 0; m < M; ++m) {
        float sum = 0;
        for (int k = 0; k < parts; ++k)
          sum += acc_of(k)[offset + (n / kCols) * M * kCols + m * kCols + n % kCols];
        dst[n * M + m] = sum;
      }
  };
  if (!in_loop) {
    weight_grads_blas<float>(x, h, da_all_p, ld_da, T, B, I, H, dw_ih, dw_hh);
    return;
  }
  if (dw_ih) reduce_transposed(gpad, I, dw_ih);
  if (dw_hh) reduce_transposed(gpad + (dw_ih ? I * gpad : 0), H, dw_hh);
}

}  // namespace avx512
#endif

// ---------------------------------------------------------------- whole sequences
void sequence_forward_cpu(const Tensor& x, const Tensor& w_ih, const Tensor& w_hh,
                          const Tensor& bias, Tensor& gates, Tensor& hs, Tensor& cs, Tensor& output,
                          bool h0_zero) {
  const int64_t T = gates.size(0), B = gates.size(1), H = gates.size(2) / 4, I = x.size(2);
  dispatch_floating(gates.dtype(), "lstm_sequence_forward", [&](auto tag) {
    using T_ = decltype(tag);
    const T_* xp = static_cast<const T_*>(x.data_ptr());
    const T_* wi = static_cast<const T_*>(w_ih.data_ptr());
    const T_* wh = static_cast<const T_*>(w_hh.data_ptr());
    const T_* b = static_cast<const T_*>(bias.data_ptr());
    T_* a = static_cast<T_*>(gates.data_ptr());
    T_* h = static_cast<T_*>(hs.data_ptr());
    T_* c = static_cast<T_*>(cs.data_ptr());
    T_* out = static_cast<T_*>(output.data_ptr());
#if defined(__AVX512F__)
    if constexpr (std::is_same_v<T_, float>) {
      avx512::sequence_forward(xp, wi, wh, b, a, h, c, out, T, B, I, H, h0_zero);
      return;
    }
#endif
    const int64_t ga = B * 4 * H, gh = B * H;  // per-step strides
    // Step t on rows [r0, r1): gates[t] = x_t·W_ihᵀ + h_{t-1}·W_hhᵀ (x_t's rows are T·I apart
    // in the batch-first input), then the cell.
    auto step_rows = [&](int64_t t, int64_t r0, int64_t r1, bool threads_inside) {
      T_* at = a + t * ga;
      gemm_rows<T_>(r1 - r0, 4 * H, I, xp + r0 * T * I + t * I, T * I, wi, true, I, T_(0),
                    at + r0 * 4 * H, 4 * H);
      if (t > 0 || !h0_zero)
        gemm_rows<T_>(r1 - r0, 4 * H, H, h + t * gh + r0 * H, H, wh, true, H, T_(1),
                      at + r0 * 4 * H, 4 * H);
      auto cell = [&](int64_t s0, int64_t s1) {
        cell_forward_rows<T_>(at, b, c + t * gh, c + (t + 1) * gh, h + (t + 1) * gh, out + t * H,
                              T * H, s0, s1, H);
      };
      if (threads_inside)
        parallel_for(r1 - r0, cell_grain_rows(H),
                     [&](int64_t s0, int64_t s1) { cell(r0 + s0, r0 + s1); });
      else
        cell(r0, r1);
    };
    int nt = batch_threads(B);
    if (nt > 1) {
      over_batch_shards(nt, B, [&](int64_t r0, int64_t r1) {
        for (int64_t t = 0; t < T; ++t) step_rows(t, r0, r1, false);
      });
    } else {
      for (int64_t t = 0; t < T; ++t) step_rows(t, 0, B, true);
    }
  });
}

void sequence_backward_cpu(const Tensor& x, const Tensor& w_ih, const Tensor& w_hh,
                           const Tensor& gates, const Tensor& hs, const Tensor& cs,
                           const Tensor& dout, Tensor& dh, Tensor& dc, bool need_dh0, Tensor& dx,
                           Tensor& dw_ih, Tensor& dw_hh, Tensor& dbias) {
  const int64_t T = gates.size(0), B = gates.size(1), H = gates.size(2) / 4, I = x.size(2);
  const int64_t G = 4 * H;
  dispatch_floating(gates.dtype(), "lstm_sequence_backward", [&](auto tag) {
    using T_ = decltype(tag);
    auto in = [](const Tensor& t) { return static_cast<const T_*>(t.data_ptr()); };
    auto opt = [](Tensor& t) { return t.defined() ? static_cast<T_*>(t.data_ptr()) : nullptr; };
    const T_* xp = in(x);
    const T_* wi = in(w_ih);
    const T_* wh = in(w_hh);
    const T_* a = in(gates);
    const T_* h = in(hs);
    const T_* c = in(cs);
    const T_* go = in(dout);
    T_* dhp = opt(dh);
    T_* dcp = opt(dc);
#if defined(__AVX512F__)
    if constexpr (std::is_same_v<T_, float>) {
      avx512::sequence_backward(xp, wi, wh, a, h, c, go, dhp, dcp, need_dh0, opt(dx), opt(dw_ih),
                                opt(dw_hh), opt(dbias), T, B, I, H);
      return;
    }
#endif
    // With the BLAS: the recurrence writes dA for every step; dx, the weight gradients and the
    // bias gradient then come from a few large products over it.
    Tensor da_buf = workspace(T * B * G, gates.dtype());
    T_* da = da_buf.data<T_>();
    const int64_t ga = B * G, gh = B * H;
    // Step t on rows [r0, r1): the cell, then dh_{t-1}[rows] = dA_t[rows]·W_hh (the cell has
    // already consumed dh_t[rows], so the GEMM may overwrite it).
    auto step_rows = [&](int64_t t, int64_t r0, int64_t r1) {
      cell_backward_rows<T_>(a + t * ga, c + t * gh, c + (t + 1) * gh, go + t * H, T * H, dhp, dcp,
                             da + t * ga + r0 * G, G, nullptr, r0, r1, H);
      if (t > 0 || need_dh0)
        gemm_rows<T_>(r1 - r0, H, G, da + t * ga + r0 * G, G, wh, false, H, T_(0), dhp + r0 * H, H);
    };
    int nt = batch_threads(B);
    if (nt > 1) {
      over_batch_shards(nt, B, [&](int64_t r0, int64_t r1) {
        for (int64_t t = T - 1; t >= 0; --t) step_rows(t, r0, r1);
      });
    } else {
      for (int64_t t = T - 1; t >= 0; --t) {
        parallel_for(B, cell_grain_rows(H), [&](int64_t r0, int64_t r1) {
          cell_backward_rows<T_>(a + t * ga, c + t * gh, c + (t + 1) * gh, go + t * H, T * H, dhp,
                                 dcp, da + t * ga + r0 * G, G, nullptr, r0, r1, H);
        });
        if (t > 0 || need_dh0) gemm_rows<T_>(B, H, G, da + t * ga, G, wh, false, H, T_(0), dhp, H);
      }
    }
    // dx[b, t] = dA_t[b]·W_ih, one GEMM per step writing the batch-first rows (T·I apart).
    if (T_* dxp = opt(dx))
      for (int64_t t = 0; t < T; ++t)
        gemm_rows<T_>(B, I, G, da + t * ga, G, wi, false, I, T_(0), dxp + t * I, T * I);
    weight_grads_blas<T_>(xp, h, da, G, T, B, I, H, opt(dw_ih), opt(dw_hh));
    // The bias gradient: column sums of dA.
    if (T_* db = opt(dbias)) {
      std::fill(db, db + G, T_(0));
      for (int64_t q = 0; q < T * B; ++q)
        for (int64_t n = 0; n < G; ++n) db[n] += da[q * G + n];
    }
  });
}

}  // namespace

FREIGHT_REGISTER_KERNEL(kernels::lstm_cell_forward, CPU, cell_forward_cpu);
FREIGHT_REGISTER_KERNEL(kernels::lstm_cell_backward, CPU, cell_backward_cpu);
FREIGHT_REGISTER_KERNEL(kernels::lstm_sequence_forward, CPU, sequence_forward_cpu);
FREIGHT_REGISTER_KERNEL(kernels::lstm_sequence_backward, CPU, sequence_backward_cpu);

}  // namespace freight::cpu
