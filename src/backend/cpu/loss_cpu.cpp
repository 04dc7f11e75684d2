// CPU kernels of the loss family. Batch means are accumulated in double over fixed blocks of
// work, so the result does not depend on the number of threads and small batches run inline
// without allocating.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/dispatch.h"
#include "backend/cpu/parallel.h"
#include "backend/cpu/vec_math.h"
#include "freight/error.h"
#include "ops/kernels/loss.h"

namespace freight::cpu {
namespace {

// Σ of fn(begin, end) over [0, n) in blocks of about 8192 units of work (`cost` per item);
// blocks run in parallel once the whole exceeds the elementwise grain, and their partial sums
// are added in block order.
template <class Fn>
double block_sum(int64_t n, int64_t cost, Fn&& fn) {
  cost = std::max<int64_t>(cost, 1);
  int64_t block = std::max<int64_t>(1, 8192 / cost);
  int64_t blocks = (n + block - 1) / block;
  if (blocks <= 1) return n > 0 ? fn(int64_t(0), n) : 0.0;
  std::vector<double> partial(size_t(blocks), 0.0);
  parallel_for(blocks, std::max<int64_t>(1, elementwise_grain() / (block * cost)),
               [&](int64_t b, int64_t e) {
                 for (int64_t k = b; k < e; ++k)
                   partial[size_t(k)] = fn(k * block, std::min(n, (k + 1) * block));
               });
  double s = 0;
  for (double p : partial) s += p;
  return s;
}

// ---------------------------------------------------------------- cross_entropy
void check_labels(const int64_t* labels, int64_t n, int64_t c) {
  for (int64_t i = 0; i < n; ++i) {
    int64_t l = labels[i];
    if (l < 0 || l >= c) [[unlikely]]
      throw Error(fmt::format(
          "cross_entropy: label {} at position {} is out of range for {} classes (expected 0 <= "
          "label < {})",
          l, i, c, c));
  }
}

constexpr int64_t kShortRow = 64;      // rows shorter than this take the blocked path
constexpr int64_t kBlockElems = 2048;  // elements per block of short rows (fits in L1)

// Per row: m = max, s = Σ exp(x − m), loss = log s − (x[label] − m); with `probs`, the
// exponentials are stored on the way and scaled by 1/s (the softmax). Returns Σ loss over rows
// [r0, r1).
template <class T>
double cross_entropy_rows(const T* x, const int64_t* labels, int64_t r0, int64_t r1, int64_t c,
                          T* probs) {
  double acc = 0;
  if (c >= kShortRow) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* xr = x + r * c;
      const T m = row_max(xr, c);
      const T s = probs ? softmax_row(xr, c, m, probs + r * c) : sum_exp_shifted(xr, c, m);
      acc += double(std::log(s)) - double(xr[labels[r]] - m);
    }
    return acc;
  }
  // Short rows (10 classes, say) a block at a time: shift each row by its max, then one long
  // SIMD exponential over the block, then per-row sums; no vector set-up per row. The log of
  // the sums is taken once per kLogGroup rows, as the log of their product in double (each sum
  // lies in [1, c] with c < 64, so 32 of them stay below 2^192): Σ log s = log Π s.
  constexpr int64_t kLogGroup = 32;
  T scratch[kBlockElems];
  int64_t per = kBlockElems / c;
  double prod = 1.0;
  int64_t in_prod = 0;
  for (int64_t b = r0; b < r1; b += per) {
    int64_t e = std::min(r1, b + per);
    T* eb = probs ? probs + b * c : scratch;
    for (int64_t r = b; r < e; ++r) {
      const T* xr = x + r * c;
      T* er = eb + (r - b) * c;
      T m = xr[0];
      for (int64_t j = 1; j < c; ++j) m = xr[j] > m ? xr[j] : m;
      acc -= double(xr[labels[r]] - m);
#pragma omp simd
      for (int64_t j = 0; j < c; ++j) er[j] = xr[j] - m;
    }
    int64_t len = (e - b) * c;
#pragma omp simd
    for (int64_t i = 0; i < len; ++i) eb[i] = exp_t(eb[i]);
    for (int64_t r = b; r < e; ++r) {
      T* er = eb + (r - b) * c;
      T s = 0;
      for (int64_t j = 0; j < c; ++j) s += er[j];
      prod *= double(s);
      if (++in_prod == kLogGroup) {
        acc += std::log(prod);
        prod = 1.0;
        in_prod = 0;
      }
      if (probs) {
        T inv = T(1) / s;
#pragma omp simd
        for (int64_t j = 0; j < c; ++j) er[j] *= inv;
      }
    }
  }
  return acc + std::log(prod);
}

template <class T>
void cross_entropy_forward_typed(const T* x, const int64_t* labels, int64_t n, int64_t c, T* probs,
                                 T* loss) {
  check_labels(labels, n, c);
  double total = block_sum(n, c, [&](int64_t r0, int64_t r1) {
    return cross_entropy_rows(x, labels, r0, r1, c, probs);
  });
  loss[0] = T(total / double(n));  // n == 0 gives NaN, as PyTorch's mean of nothing
}

void cross_entropy_forward_cpu(const Tensor& logits, const Tensor& labels, Tensor& probs,
                               Tensor& loss) {
  dispatch_floating(logits.dtype(), "cross_entropy_forward", [&](auto tag) {
    using T = decltype(tag);
    cross_entropy_forward_typed(static_cast<const T*>(logits.data_ptr()), labels.data<int64_t>(),
                                logits.size(0), logits.size(1),
                                probs.defined() ? static_cast<T*>(probs.data_ptr()) : nullptr,
                                static_cast<T*>(loss.data_ptr()));
  });
}

void cross_entropy_backward_cpu(const Tensor& probs, const Tensor& labels, const Tensor& grad_loss,
                                Tensor& grad_logits) {
  dispatch_floating(probs.dtype(), "cross_entropy_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* p = static_cast<const T*>(probs.data_ptr());
    const int64_t* l = labels.data<int64_t>();
    T* g = static_cast<T*>(grad_logits.data_ptr());
    int64_t n = probs.size(0), c = probs.size(1);
    T k = T(grad_loss.item() / double(n));
    // One flat SIMD pass p · k over the rows of a chunk, then −k at each row's label.
    parallel_for(n, std::max<int64_t>(1, elementwise_grain() / std::max<int64_t>(c, 1)),
                 [&](int64_t r0, int64_t r1) {
#pragma omp simd
                   for (int64_t i = r0 * c; i < r1 * c; ++i) g[i] = p[i] * k;
                   for (int64_t r = r0; r < r1; ++r) g[r * c + l[r]] -= k;
                 });
  });
}

// ---------------------------------------------------------------- mse_loss
void mse_loss_forward_cpu(const Tensor& prediction, const Tensor& target, Tensor& loss) {
  dispatch_floating(prediction.dtype(), "mse_loss_forward", [&](auto tag) {
    using T = decltype(tag);
    const T* p = static_cast<const T*>(prediction.data_ptr());
    const T* t = static_cast<const T*>(target.data_ptr());
    int64_t n = prediction.numel();
    double total = block_sum(n, 1, [&](int64_t b, int64_t e) {
      double acc = 0;
#pragma omp simd reduction(+ : acc)
      for (int64_t i = b; i < e; ++i) {
        T d = p[i] - t[i];
        acc += double(d * d);
      }
      return acc;
    });
    static_cast<T*>(loss.data_ptr())[0] = T(total / double(n));
  });
}

void mse_loss_backward_cpu(const Tensor& prediction, const Tensor& target, const Tensor& grad_loss,
                           Tensor& grad_prediction, Tensor& grad_target) {
  dispatch_floating(prediction.dtype(), "mse_loss_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* p = static_cast<const T*>(prediction.data_ptr());
    const T* t = static_cast<const T*>(target.data_ptr());
    T* gp = grad_prediction.defined() ? static_cast<T*>(grad_prediction.data_ptr()) : nullptr;
    T* gt = grad_target.defined() ? static_cast<T*>(grad_target.data_ptr()) : nullptr;
    int64_t n = prediction.numel();
    T k = T(2.0 * grad_loss.item() / double(n));
    parallel_for(n, elementwise_grain(), [&](int64_t b, int64_t e) {
      if (gp && gt) {
#pragma omp simd
        for (int64_t i = b; i < e; ++i) {
          T v = k * (p[i] - t[i]);
          gp[i] = v;
          gt[i] = -v;
        }
      } else if (gp) {
#pragma omp simd
        for (int64_t i = b; i < e; ++i) gp[i] = k * (p[i] - t[i]);
      } else if (gt) {
#pragma omp simd
        for (int64_t i = b; i < e; ++i) gt[i] = k * (t[i] - p[i]);
      }
    });
  });
}

}  // namespace

FREIGHT_REGISTER_KERNEL(kernels::cross_entropy_forward, CPU, cross_entropy_forward_cpu);
FREIGHT_REGISTER_KERNEL(kernels::cross_entropy_backward, CPU, cross_entropy_backward_cpu);
FREIGHT_REGISTER_KERNEL(kernels::mse_loss_forward, CPU, mse_loss_forward_cpu);
FREIGHT_REGISTER_KERNEL(kernels::mse_loss_backward, CPU, mse_loss_backward_cpu);

}  // namespace freight::cpu
