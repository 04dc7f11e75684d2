// Vectorisable float32 transcendental functions. Written with arithmetic, comparisons and bit
// casts only, so GCC turns loops over them into AVX2/AVX-512 code (the libm calls would stay
// scalar). Accuracy is within a few ulp over the ranges used by activations; float64 kernels use
// the libm functions instead.
#pragma once
#include <bit>
#include <cmath>
#include <cstdint>
#include <type_traits>

namespace freight::cpu {

// exp(x) = 2^n · exp(r), n = round(x / ln 2), |r| <= ln2 / 2; exp(r) by its degree-6 Taylor
// polynomial (truncation error below 2e-8 on that interval). ExpParts holds n and exp(r).
struct ExpParts {
  float n, p;
};
inline ExpParts exp_parts(float x) {
  float n = std::floor(x * 1.44269504088896341f + 0.5f);
  // ln 2 split in a high part exact in float and a low correction (Cody-Waite reduction).
  float r = x - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  return {n, p};
}
// 2^k for a whole k in [−126, 127], built in the exponent bits.
inline float exp2_whole(int32_t k) {
  return std::bit_cast<float>((k + 127) << 23);
}

// For the activations, softmax and the losses: the input clamped to [-87.34, 88], where 2^n is
// one normal float. The lower bound lies just under ln(FLT_MIN) ≈ -87.3365: there p(r) < 1 makes
// the result subnormal, which the CPU threads flush to 0 (threads.cpp), so the exponential of a
// logit masked with -inf or -1e9 is exactly 0, as in PyTorch (a bound of -87 gave 1.6e-38).
// (A NaN fails both comparisons of the clamp: it is reduced as the lower bound, which keeps the
// float-to-int conversion of n defined, and comes back as it went in.)
inline float vexp(float x) {
  const float c = x > -87.34f ? (x < 88.0f ? x : 88.0f) : -87.34f;
  const ExpParts e = exp_parts(c);
  const float y = e.p * exp2_whole(int32_t(e.n));
  return x == x ? y : x;
}

// exp over float's whole range, for the exp op (the clamp of vexp, which the activations never
// notice, made exp(88.5) 1.65e38 instead of 2.7e38 and exp(100) finite): 2^n is applied as
// 2^⌊n/2⌋ · 2^(n−⌊n/2⌋), so n may run from −150 to 129 with both factors normal floats. Above
// ln(FLT_MAX) ≈ 88.72 the product overflows to inf; below about −87.3 it rounds once into the
// subnormals, and reaches 0 below about −103.97.
inline float vexp_full(float x) {
  const float c = x > -104.0f ? (x < 89.0f ? x : 89.0f) : -104.0f;
  const ExpParts e = exp_parts(c);
  const int32_t n1 = int32_t(e.n) >> 1, n2 = int32_t(e.n) - n1;
  const float y = e.p * exp2_whole(n1) * exp2_whole(n2);
  return x == x ? y : x;
}

inline float vsigmoid(float x) {
  return 1.0f / (1.0f + vexp(-x));
}

// tanh: odd Taylor series for |x| < 0.25 (error < 1e-8 relative), else 1 - 2/(e^{2|x|} + 1)
// with the sign restored (no cancellation worse than 2 bits there).
inline float vtanh(float x) {
  float a = std::fabs(x);
  float x2 = x * x;
  float small =
      x * (1.0f + x2 * (-1.0f / 3 + x2 * (2.0f / 15 + x2 * (-17.0f / 315 + x2 * (62.0f / 2835)))));
  float big = 1.0f - 2.0f / (vexp(2.0f * a) + 1.0f);
  big = std::copysign(big, x);
  return a < 0.25f ? small : big;
}

// erf by Abramowitz & Stegun 7.1.26 (absolute error below 1.5e-7), odd extension.
inline float verf(float x) {
  float a = std::fabs(x);
  float t = 1.0f / (1.0f + 0.3275911f * a);
  float poly =
      t * (0.254829592f +
           t * (-0.284496736f + t * (1.421413741f + t * (-1.453152027f + t * 1.061405429f))));
  float y = 1.0f - poly * vexp(-a * a);
  return std::copysign(y, x);
}

// GELU, exact form: x·Φ(x) = x/2 · (1 + erf(x/√2)); derivative Φ(x) + x·φ(x).
inline float vgelu(float x) {
  return 0.5f * x * (1.0f + verf(x * 0.70710678118654752f));
}
inline float vgelu_grad(float x) {
  float cdf = 0.5f * (1.0f + verf(x * 0.70710678118654752f));
  float pdf = 0.39894228040143268f * vexp(-0.5f * x * x);
  return cdf + x * pdf;
}

inline double gelu(double x) {
  return 0.5 * x * (1.0 + std::erf(x * 0.70710678118654752));
}
inline double gelu_grad(double x) {
  return 0.5 * (1.0 + std::erf(x * 0.70710678118654752)) +
         x * 0.39894228040143268 * std::exp(-0.5 * x * x);
}

// exp in the kernel's type: the vectorisable float exp above, std::exp for double.
template <class T>
inline T exp_t(T v) {
  if constexpr (std::is_same_v<T, float>)
    return vexp(v);
  else
    return std::exp(v);
}

// The largest of a row's n >= 1 elements (softmax shifts by it, so exp never overflows).
template <class T>
inline T row_max(const T* x, int64_t n) {
  T m = x[0];
#pragma omp simd reduction(max : m)
  for (int64_t i = 1; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

// Σ exp(x[i] − m) over a row.
template <class T>
inline T sum_exp_shifted(const T* x, int64_t n, T m) {
  T s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += exp_t(x[i] - m);
  return s;
}

// out[i] = exp(x[i] − m) / Σ exp(x[j] − m); returns the sum Σ exp(x[j] − m).
template <class T>
inline T softmax_row(const T* x, int64_t n, T m, T* out) {
  T s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) {
    T e = exp_t(x[i] - m);
    out[i] = e;
    s += e;
  }
  T inv = T(1) / s;
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] *= inv;
  return s;
}

}  // namespace freight::cpu
