// CPU kernels of batch normalisation on x viewed as [n, c, s]. With s > 1 every (image,
// channel) pair is a contiguous plane of s values, and the threads take whole channels; with
// s = 1 ([N, C] input) a channel is a strided column, so the threads take ranges of channels and
// walk the rows, vectorising across channels. Per-channel sums accumulate in double (a channel
// of a ResNet batch has 65536 values; float sums would lose digits the variance needs).
#include <cmath>
#include <vector>

#include "backend/cpu/dispatch.h"
#include "backend/cpu/parallel.h"
#include "backend/cpu/unary_rules.h"
#include "ops/kernels/norm.h"
#include "ops/kernels/typed_data.h"

namespace freight::cpu {
namespace {

// Channels per thread chunk so that a chunk holds enough values to be worth a thread.
int64_t channel_grain(int64_t n, int64_t s) {
  return std::max<int64_t>(1, elementwise_grain() / std::max<int64_t>(1, n * s));
}

// A fused ReLU's backward: u where relu_passes(y), else 0. The forward's output y = v·ms + mt is
// recomputed from the input v (read anyway) with the forward's own expression (channel_affine's
// a·u + k with the same scale and shift), so it is the same value bit for bit. A select, not a
// branch, so the loops stay vectorised. Without Masked: u.
template <bool Masked, class T>
inline T masked(T u, T v, T ms, T mt) {
  if constexpr (Masked)
    return relu_passes(ms * v + mt) ? u : T(0);
  else
    return u;
}

// Per-channel sums over the n·s positions of each channel, in double:
//   kShifted:  sa[ch] = Σ (u − mu[ch]),  sb[ch] = Σ (u − mu[ch])²
//   kSumDot:   sa[ch] = Σ u,             sb[ch] = Σ u·(v − mu[ch])
// kSumDot reads u through `masked` (ms, mt: per-channel scale and shift; null unless Masked).
// (Raw pointer loops: written with index-taking lambdas GCC vectorised them as gathers.)
enum SumKind { kShifted, kSumDot };
template <SumKind K, bool Masked, class T>
void channel_sums(int64_t n, int64_t c, int64_t s, const T* u, const T* v, const double* mu,
                  const T* ms, const T* mt, double* sa, double* sb) {
  static_assert(K == kSumDot || !Masked);
  if (s == 1) {  // rows of c channels: vectorise across channels
    parallel_for(c, channel_grain(n, s), [&](int64_t c0, int64_t c1) {
      for (int64_t ch = c0; ch < c1; ++ch) sa[ch] = 0, sb[ch] = 0;
      for (int64_t i = 0; i < n; ++i) {
        const T* ur = u + i * c;
        const T* vr = v ? v + i * c : nullptr;
#pragma omp simd
        for (int64_t ch = c0; ch < c1; ++ch) {
          if constexpr (K == kShifted) {
            const double d = double(ur[ch]) - mu[ch];
            sa[ch] += d;
            sb[ch] += d * d;
          } else {
            const double uc =
                Masked ? double(masked<Masked>(ur[ch], vr[ch], ms[ch], mt[ch])) : double(ur[ch]);
            sa[ch] += uc;
            sb[ch] += uc * (double(vr[ch]) - mu[ch]);
          }
        }
      }
    });
    return;
  }
  parallel_for(c, channel_grain(n, s), [&](int64_t c0, int64_t c1) {
    for (int64_t ch = c0; ch < c1; ++ch) {
      double a = 0, b = 0;
      const double m = mu[ch];
      const T s_ = Masked ? ms[ch] : T(0), t_ = Masked ? mt[ch] : T(0);
      for (int64_t i = 0; i < n; ++i) {
        const T* up = u + (i * c + ch) * s;
        const T* vp = v ? v + (i * c + ch) * s : nullptr;
        if constexpr (K == kShifted) {
#pragma omp simd reduction(+ : a, b)
          for (int64_t j = 0; j < s; ++j) {
            const double d = double(up[j]) - m;
            a += d;
            b += d * d;
          }
        } else {
#pragma omp simd reduction(+ : a, b)
          for (int64_t j = 0; j < s; ++j) {
            const double uj = double(masked<Masked>(up[j], vp[j], s_, t_));
            a += uj;
            b += uj * (double(vp[j]) - m);
          }
        }
      }
      sa[ch] = a, sb[ch] = b;
    }
  });
}

// The ReLU of a fused ReLU: relu's own rule, relu_value.
template <bool Relu, class T>
inline T clamped(T v) {
  if constexpr (Relu)
    return relu_value(v);
  else
    return v;
}

// out = ka[ch]·u + kb[ch]·v + kc[ch] elementwise (v may be null: then no kb term), with the
// result through `clamped` and, given v, u through `masked` (ms, mt as for channel_sums).
template <bool Relu, bool Masked, class T>
void channel_affine(int64_t n, int64_t c, int64_t s, const T* u, const T* v, const T* ka,
                    const T* kb, const T* kc, const T* ms, const T* mt, T* out) {
  if (s == 1) {
    parallel_for(n, std::max<int64_t>(1, elementwise_grain() / std::max<int64_t>(1, c)),
                 [&](int64_t i0, int64_t i1) {
                   for (int64_t i = i0; i < i1; ++i) {
                     const T* ur = u + i * c;
                     T* o = out + i * c;
                     if (v) {
                       const T* vr = v + i * c;
#pragma omp simd
                       for (int64_t ch = 0; ch < c; ++ch) {
                         const T uc =
                             Masked ? masked<Masked>(ur[ch], vr[ch], ms[ch], mt[ch]) : ur[ch];
                         o[ch] = clamped<Relu>(ka[ch] * uc + kb[ch] * vr[ch] + kc[ch]);
                       }
                     } else {
#pragma omp simd
                       for (int64_t ch = 0; ch < c; ++ch)
                         o[ch] = clamped<Relu>(ka[ch] * ur[ch] + kc[ch]);
                     }
                   }
                 });
    return;
  }
  parallel_for(n * c, std::max<int64_t>(1, elementwise_grain() / s), [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t ch = p % c;
      const T a = ka[ch], k = kc[ch];
      const T* up = u + p * s;
      T* o = out + p * s;
      if (v) {
        const T* vp = v + p * s;
        const T b = kb[ch];
        const T s_ = Masked ? ms[ch] : T(0), t_ = Masked ? mt[ch] : T(0);
#pragma omp simd
        for (int64_t j = 0; j < s; ++j)
          o[j] = clamped<Relu>(a * masked<Masked>(up[j], vp[j], s_, t_) + b * vp[j] + k);
      } else {
#pragma omp simd
        for (int64_t j = 0; j < s; ++j) o[j] = clamped<Relu>(a * up[j] + k);
      }
    }
  });
}

// The forward's per-channel y = x·scale + shift: scale = invstd·γ, shift = β − mean·scale (in T;
// the backward of a fused ReLU recomputes y from them).
template <class T>
void forward_scale_shift(int64_t c, const T* pm, const T* pi, const T* pw, const T* pb,
                         std::vector<T>& scale, std::vector<T>& shift) {
  scale.resize(c), shift.resize(c);
  for (int64_t ch = 0; ch < c; ++ch) {
    scale[ch] = pi[ch] * (pw ? pw[ch] : T(1));
    shift[ch] = (pb ? pb[ch] : T(0)) - pm[ch] * scale[ch];
  }
}

// ---------------------------------------------------------------- statistics
void stats_cpu(const Tensor& x, int64_t n, int64_t c, int64_t s, double eps, Tensor& mean,
               Tensor& var, Tensor& invstd) {
  dispatch_floating(x.dtype(), "batch_norm_stats", [&](auto tag) {
    using T = decltype(tag);
    const T* px = cptr<T>(x);
    const double m = double(n * s);
    // One pass over x for Σd and Σd², d = x − K with K a value of the channel (its first): the
    // variance (Σd² − (Σd)²/m)/m then cancels only as much as the spread is small compared with
    // the distance from K to the mean, not to 0 (E[x²] − E[x]² fails for large means).
    std::vector<double> shift(c), sum_d(c), sq(c), mu(c);
    for (int64_t ch = 0; ch < c; ++ch) shift[ch] = double(px[ch * s]);
    channel_sums<kShifted, false, T>(n, c, s, px, nullptr, shift.data(), nullptr, nullptr,
                                     sum_d.data(), sq.data());
    for (int64_t ch = 0; ch < c; ++ch) {
      mu[ch] = shift[ch] + sum_d[ch] / m;
      // Σ(x − mean)², clamped at 0 against rounding but not against NaN: an infinity or a NaN
      // in the channel leaves NaN here (∞ − ∞), so its output and running variance are NaN, as
      // in PyTorch (std::max(0.0, NaN) is 0, which made the output ±∞ and kept the running
      // variance finite).
      const double centred = sq[ch] - sum_d[ch] * sum_d[ch] / m;
      sq[ch] = centred < 0 ? 0.0 : centred;
    }
    T* pm = mptr<T>(mean);
    T* pv = mptr<T>(var);
    T* pi = mptr<T>(invstd);
    for (int64_t ch = 0; ch < c; ++ch) {
      const double v = sq[ch] / m;
      pm[ch] = T(mu[ch]);
      pv[ch] = T(v);
      pi[ch] = T(1.0 / std::sqrt(v + eps));
    }
  });
}

void update_running_cpu(const Tensor& mean, const Tensor& var, double momentum, int64_t count,
                        Tensor& running_mean, Tensor& running_var) {
  dispatch_floating(mean.dtype(), "batch_norm_update_running", [&](auto tag) {
    using T = decltype(tag);
    const T* pm = cptr<T>(mean);
    const T* pv = cptr<T>(var);
    T* rm = mptr<T>(running_mean);
    T* rv = mptr<T>(running_var);
    const double unbias = double(count) / double(count - 1);  // Bessel's correction
    for (int64_t ch = 0; ch < mean.numel(); ++ch) {
      rm[ch] = T((1 - momentum) * double(rm[ch]) + momentum * double(pm[ch]));
      rv[ch] = T((1 - momentum) * double(rv[ch]) + momentum * double(pv[ch]) * unbias);
    }
  });
}

void invstd_cpu(const Tensor& var, double eps, Tensor& invstd) {
  dispatch_floating(var.dtype(), "batch_norm_invstd", [&](auto tag) {
    using T = decltype(tag);
    const T* pv = cptr<T>(var);
    T* pi = mptr<T>(invstd);
    for (int64_t ch = 0; ch < var.numel(); ++ch) pi[ch] = T(1.0 / std::sqrt(double(pv[ch]) + eps));
  });
}

// ---------------------------------------------------------------- forward and backward
void forward_cpu(const Tensor& x, const Tensor& mean, const Tensor& invstd, const Tensor& weight,
                 const Tensor& bias, int64_t n, int64_t c, int64_t s, bool relu, Tensor& y) {
  dispatch_floating(x.dtype(), "batch_norm_forward", [&](auto tag) {
    using T = decltype(tag);
    const T* px = cptr<T>(x);
    const T* pm = cptr<T>(mean);
    const T* pi = cptr<T>(invstd);
    const T* pw = cptr<T>(weight);
    const T* pb = cptr<T>(bias);
    T* py = mptr<T>(y);
    std::vector<T> scale, shift;
    forward_scale_shift<T>(c, pm, pi, pw, pb, scale, shift);
    if (relu)
      channel_affine<true, false, T>(n, c, s, px, nullptr, scale.data(), nullptr, shift.data(),
                                     nullptr, nullptr, py);
    else
      channel_affine<false, false, T>(n, c, s, px, nullptr, scale.data(), nullptr, shift.data(),
                                      nullptr, nullptr, py);
  });
}

void backward_cpu(const Tensor& gy, const Tensor& x, const Tensor& mean, const Tensor& invstd,
                  const Tensor& weight, const Tensor& bias, bool relu, bool training, int64_t n,
                  int64_t c, int64_t s, Tensor& gx, Tensor& gweight, Tensor& gbias) {
  dispatch_floating(gy.dtype(), "batch_norm_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* pg = cptr<T>(gy);
    const T* px = cptr<T>(x);
    const T* pm = cptr<T>(mean);
    const T* pi = cptr<T>(invstd);
    const T* pw = cptr<T>(weight);
    // A fused ReLU: the forward's scale and shift, to recompute its output's sign.
    std::vector<T> ms, mt;
    if (relu) forward_scale_shift<T>(c, pm, pi, pw, cptr<T>(bias), ms, mt);
    T* dx = mptr<T>(gx);
    T* dw = mptr<T>(gweight);
    T* db = mptr<T>(gbias);
    std::vector<double> sum_dy(c, 0.0), sum_dy_xc(c, 0.0), mu(c);  // Σ gy, Σ gy·(x − mean)
    for (int64_t ch = 0; ch < c; ++ch) mu[ch] = double(pm[ch]);
    if ((training && dx) || dw || db) {
      if (relu)
        channel_sums<kSumDot, true, T>(n, c, s, pg, px, mu.data(), ms.data(), mt.data(),
                                       sum_dy.data(), sum_dy_xc.data());
      else
        channel_sums<kSumDot, false, T>(n, c, s, pg, px, mu.data(), nullptr, nullptr, sum_dy.data(),
                                        sum_dy_xc.data());
    }
    for (int64_t ch = 0; ch < c; ++ch) {
      if (dw) dw[ch] = T(sum_dy_xc[ch] * double(pi[ch]));  // Σ gy·x̂
      if (db) db[ch] = T(sum_dy[ch]);
    }
    if (!dx) return;
    // With A = γ·invstd: in evaluation gx = A·gy. In training x̂ also depends on x through the
    // batch mean and invstd, which gives gx = A·(gy − Σgy/m − x̂·Σ(gy·x̂)/m); expanded in x,
    //   gx = A·gy − B·x + C,  B = A·invstd²·Σ(gy·(x − mean))/m,  C = B·mean − A·Σgy/m.
    const double m = double(n * s);
    std::vector<T> ka(c), kb(c), kc(c);
    for (int64_t ch = 0; ch < c; ++ch) {
      const double A = double(pi[ch]) * (pw ? double(pw[ch]) : 1.0);
      const double B = training ? A * double(pi[ch]) * double(pi[ch]) * sum_dy_xc[ch] / m : 0.0;
      const double C = training ? B * double(pm[ch]) - A * sum_dy[ch] / m : 0.0;
      ka[ch] = T(A), kb[ch] = T(-B), kc[ch] = T(C);
    }
    if (relu)
      channel_affine<false, true, T>(n, c, s, pg, px, ka.data(), kb.data(), kc.data(), ms.data(),
                                     mt.data(), dx);
    else
      channel_affine<false, false, T>(n, c, s, pg, px, ka.data(), kb.data(), kc.data(), nullptr,
                                      nullptr, dx);
  });
}

}  // namespace

FREIGHT_REGISTER_KERNEL(kernels::batch_norm_stats, CPU, stats_cpu);
FREIGHT_REGISTER_KERNEL(kernels::batch_norm_update_running, CPU, update_running_cpu);
FREIGHT_REGISTER_KERNEL(kernels::batch_norm_invstd, CPU, invstd_cpu);
FREIGHT_REGISTER_KERNEL(kernels::batch_norm_forward, CPU, forward_cpu);
FREIGHT_REGISTER_KERNEL(kernels::batch_norm_backward, CPU, backward_cpu);

}  // namespace freight::cpu
