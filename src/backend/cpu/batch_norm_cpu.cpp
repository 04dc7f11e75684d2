// CPU kernels of batch normalisation on x viewed as [n, c, s]. With s > 1 every (image,
// channel) pair is a contiguous plane of s values, and the threads take whole channels; with
// s = 1 ([N, C] input) a channel is a strided column, so the threads take ranges of channels and
// walk the rows, vectorising across channels. Per-channel sums accumulate in double (a channel
// of a ResNet batch has 65536 values; float sums would lose digits the variance needs).
#include <cmath>
#include <vector>

#include "backend/cpu/dispatch.h"
#include "backend/cpu/parallel.h"
#include "ops/kernels/norm.h"

namespace freight::cpu {
namespace {

template <class T>
const T* cptr(const Tensor& t) {
  return t.defined() ? static_cast<const T*>(t.data_ptr()) : nullptr;
}
template <class T>
T* mptr(Tensor& t) {
  return t.defined() ? static_cast<T*>(t.data_ptr()) : nullptr;
}

// Channels per thread chunk so that a chunk holds enough values to be worth a thread.
int64_t channel_grain(int64_t n, int64_t s) {
  return std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(1, n * s));
}

// For each channel ch in [0, c): sa[ch] = Σ fa(x, ch), sb[ch] = Σ fb(x, ch) over the channel's
// n·s positions, where fa/fb(i, ch) read position i (flat index into the [n, c, s] tensors).
template <class Fa, class Fb>
void channel_sums(int64_t n, int64_t c, int64_t s, double* sa, double* sb, Fa&& fa, Fb&& fb) {
  if (s == 1) {
    parallel_for(c, channel_grain(n, s), [&](int64_t c0, int64_t c1) {
      for (int64_t ch = c0; ch < c1; ++ch) sa[ch] = 0, sb[ch] = 0;
      for (int64_t i = 0; i < n; ++i) {
#pragma omp simd
        for (int64_t ch = c0; ch < c1; ++ch) {
          sa[ch] += fa(i * c + ch, ch);
          sb[ch] += fb(i * c + ch, ch);
        }
      }
    });
    return;
  }
  parallel_for(c, channel_grain(n, s), [&](int64_t c0, int64_t c1) {
    for (int64_t ch = c0; ch < c1; ++ch) {
      double a = 0, b = 0;
      for (int64_t i = 0; i < n; ++i) {
        const int64_t base = (i * c + ch) * s;
#pragma omp simd reduction(+ : a, b)
        for (int64_t j = 0; j < s; ++j) {
          a += fa(base + j, ch);
          b += fb(base + j, ch);
        }
      }
      sa[ch] = a, sb[ch] = b;
    }
  });
}

// out[i] = f(i, ch) over the whole tensor.
template <class F>
void channel_map(int64_t n, int64_t c, int64_t s, F&& f) {
  if (s == 1) {
    parallel_for(n, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(1, c)),
                 [&](int64_t i0, int64_t i1) {
                   for (int64_t i = i0; i < i1; ++i) {
#pragma omp simd
                     for (int64_t ch = 0; ch < c; ++ch) f(i * c + ch, ch);
                   }
                 });
    return;
  }
  parallel_for(n * c, std::max<int64_t>(1, kElementwiseGrain / s), [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t ch = p % c, base = p * s;
#pragma omp simd
      for (int64_t j = 0; j < s; ++j) f(base + j, ch);
    }
  });
}

// ---------------------------------------------------------------- statistics
void stats_cpu(const Tensor& x, int64_t n, int64_t c, int64_t s, double eps, Tensor& mean,
               Tensor& var, Tensor& invstd) {
  dispatch_floating(x.dtype(), "batch_norm_stats", [&](auto tag) {
    using T = decltype(tag);
    const T* px = cptr<T>(x);
    const double m = double(n * s);
    std::vector<double> sum(c), unused(c), mu(c), sq(c);
    // Two passes (the mean, then squared deviations from it): E[x²] − E[x]² would cancel
    // catastrophically when the mean is large compared with the spread.
    channel_sums(
        n, c, s, sum.data(), unused.data(), [&](int64_t i, int64_t) { return double(px[i]); },
        [](int64_t, int64_t) { return 0.0; });
    for (int64_t ch = 0; ch < c; ++ch) mu[ch] = sum[ch] / m;
    const double* pmu = mu.data();
    channel_sums(
        n, c, s, sq.data(), unused.data(),
        [&](int64_t i, int64_t ch) {
          double d = double(px[i]) - pmu[ch];
          return d * d;
        },
        [](int64_t, int64_t) { return 0.0; });
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
                 const Tensor& bias, int64_t n, int64_t c, int64_t s, Tensor& y) {
  dispatch_floating(x.dtype(), "batch_norm_forward", [&](auto tag) {
    using T = decltype(tag);
    const T* px = cptr<T>(x);
    const T* pm = cptr<T>(mean);
    const T* pi = cptr<T>(invstd);
    const T* pw = cptr<T>(weight);
    const T* pb = cptr<T>(bias);
    T* py = mptr<T>(y);
    // y = x·scale + shift with scale = invstd·γ, shift = β − mean·scale.
    std::vector<T> scale(c), shift(c);
    for (int64_t ch = 0; ch < c; ++ch) {
      scale[ch] = pi[ch] * (pw ? pw[ch] : T(1));
      shift[ch] = (pb ? pb[ch] : T(0)) - pm[ch] * scale[ch];
    }
    const T* a = scale.data();
    const T* b = shift.data();
    channel_map(n, c, s, [&](int64_t i, int64_t ch) { py[i] = px[i] * a[ch] + b[ch]; });
  });
}

void backward_cpu(const Tensor& gy, const Tensor& x, const Tensor& mean, const Tensor& invstd,
                  const Tensor& weight, bool training, int64_t n, int64_t c, int64_t s, Tensor& gx,
                  Tensor& gweight, Tensor& gbias) {
  dispatch_floating(gy.dtype(), "batch_norm_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* pg = cptr<T>(gy);
    const T* px = cptr<T>(x);
    const T* pm = cptr<T>(mean);
    const T* pi = cptr<T>(invstd);
    const T* pw = cptr<T>(weight);
    T* dx = mptr<T>(gx);
    T* dw = mptr<T>(gweight);
    T* db = mptr<T>(gbias);
    std::vector<double> sum_dy(c, 0.0), sum_dy_xc(c, 0.0);  // Σ gy and Σ gy·(x − mean)
    if ((training && dx) || dw || db)
      channel_sums(
          n, c, s, sum_dy.data(), sum_dy_xc.data(),
          [&](int64_t i, int64_t) { return double(pg[i]); },
          [&](int64_t i, int64_t ch) { return double(pg[i]) * (double(px[i]) - double(pm[ch])); });
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
      ka[ch] = T(A), kb[ch] = T(B), kc[ch] = T(C);
    }
    const T* a = ka.data();
    const T* b = kb.data();
    const T* k = kc.data();
    channel_map(n, c, s,
                [&](int64_t i, int64_t ch) { dx[i] = a[ch] * pg[i] - b[ch] * px[i] + k[ch]; });
  });
}

}  // namespace

FREIGHT_REGISTER_KERNEL(kernels::batch_norm_stats, CPU, stats_cpu);
FREIGHT_REGISTER_KERNEL(kernels::batch_norm_update_running, CPU, update_running_cpu);
FREIGHT_REGISTER_KERNEL(kernels::batch_norm_invstd, CPU, invstd_cpu);
FREIGHT_REGISTER_KERNEL(kernels::batch_norm_forward, CPU, forward_cpu);
FREIGHT_REGISTER_KERNEL(kernels::batch_norm_backward, CPU, backward_cpu);

}  // namespace freight::cpu
