// CPU kernels of the optimizers. The parameters of a step are cut into chunks of a few thousand
// elements and the chunks spread over the threads, so one call balances many small tensors (biases)
// and a few large ones (weights) alike; each chunk is a vectorised loop.
#include <cmath>
#include <string>
#include <vector>

#include "backend/cpu/dispatch.h"
#include "backend/cpu/parallel.h"
#include "ops/kernels/optim.h"

namespace freight::cpu {
namespace {

constexpr int64_t kChunk = 8192;  // elements per work item

struct Chunk {
  size_t k;  // parameter
  int64_t begin, end;
};

// A step whose tensors (parameters, gradients, state) add up to less than this stays on one
// thread. The backward pass left the gradients in the calling core's cache, and the next forward
// reads the parameters there again: a second thread would have to pull its half of every tensor
// over from that core and hand it back afterwards. For LeNet-5 (62 thousand parameters, 0.7 MB
// with SGD's momentum) that traffic made the step at batch 1 take 0.05 ms on two threads against
// 0.014 ms on one; the MLP's 535 thousand parameters (6 MB) are twice as fast on two.
constexpr int64_t kParallelStepBytes = 1 << 20;

// Calls fn(k, begin, end) over all elements of all parameters, in parallel when the step's
// `arrays` arrays per parameter (p, g and the optimizer's state) are large enough.
template <class Fn>
void for_each_chunk(const std::vector<Tensor>& params, int arrays, Fn&& fn) {
  std::vector<Chunk> chunks;
  int64_t bytes = 0;
  for (size_t k = 0; k < params.size(); ++k) {
    bytes += params[k].numel() * int64_t(dtype_size(params[k].dtype())) * arrays;
    for (int64_t b = 0; b < params[k].numel(); b += kChunk)
      chunks.push_back({k, b, std::min(b + kChunk, params[k].numel())});
  }
  const int64_t grain = bytes < kParallelStepBytes
                            ? int64_t(chunks.size())
                            : std::max<int64_t>(1, kElementwiseGrain / kChunk);
  parallel_for(int64_t(chunks.size()), grain, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) fn(chunks[c].k, chunks[c].begin, chunks[c].end);
  });
}

template <class T>
T* ptr(const Tensor& t) {
  return static_cast<T*>(t.data_ptr());
}

// ---------------------------------------------------------------- SGD
template <class T>
void sgd_range(T* p, const T* g, T* buf, bool fresh, int64_t b, int64_t e, const SgdConfig& c) {
  const T lr = T(c.lr), wd = T(c.weight_decay), mu = T(c.momentum), keep = T(1 - c.dampening);
  const bool decay = c.weight_decay != 0;
  if (!buf) {  // plain SGD: p ← p − lr·(g + wd·p)
#pragma omp simd
    for (int64_t i = b; i < e; ++i) {
      T d = decay ? g[i] + wd * p[i] : g[i];
      p[i] -= lr * d;
    }
    return;
  }
  const bool nesterov = c.nesterov;
#pragma omp simd
  for (int64_t i = b; i < e; ++i) {
    T d = decay ? g[i] + wd * p[i] : g[i];
    // The first update copies d into the new buffer (no dampening), as PyTorch does.
    T m = fresh ? d : mu * buf[i] + keep * d;
    buf[i] = m;
    T step = nesterov ? d + mu * m : m;
    p[i] -= lr * step;
  }
}

// The step scalars of optim.h, when given, replace the config's values (read on the host here).
const double* step_scalars(const Tensor& scalars, int64_t count, const char* kernel) {
  if (!scalars.defined()) return nullptr;
  FREIGHT_CHECK(
      scalars.dtype() == DType::F64 && scalars.is_contiguous() && scalars.numel() >= count,
      std::string(kernel) +
          " (cpu): step scalars must be a contiguous float64 tensor "
          "of at least " +
          std::to_string(count) + " values");
  return scalars.data<double>();
}

void sgd_step_cpu(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                  const std::vector<Tensor>& momentum, const std::vector<uint8_t>& fresh,
                  const SgdConfig& config) {
  SgdConfig cfg = config;
  if (const double* s = step_scalars(config.scalars, 1, "sgd_step")) cfg.lr = s[0];
  bool with_buffers = !momentum.empty();
  for_each_chunk(params, with_buffers ? 3 : 2, [&](size_t k, int64_t b, int64_t e) {
    dispatch_floating(params[k].dtype(), "sgd_step", [&](auto tag) {
      using T = decltype(tag);
      sgd_range<T>(ptr<T>(params[k]), ptr<T>(grads[k]),
                   with_buffers ? ptr<T>(momentum[k]) : nullptr, with_buffers && fresh[k], b, e,
                   cfg);
    });
  });
}

// ---------------------------------------------------------------- Adam / AdamW
template <class T>
void adam_range(T* p, const T* g, T* m, T* v, double bc1, double bc2, int64_t b, int64_t e,
                const AdamConfig& c) {
  // Bias corrections: m and v start at 0, so after t updates E[m] = (1 − β1ᵗ)·E[g]; dividing by
  // bc1 = 1 − β1ᵗ (and √bc2 = √(1 − β2ᵗ) for √v) removes that shrinkage. Folded into the step
  // size and the denominator in PyTorch's order of operations:
  //   m = lerp(m, g, 1 − β1);  v = β2·v + (1 − β2)·g·g
  //   p = p − (lr / bc1) · (m / (√v / √bc2 + ε))
  const T step_size = T(c.lr / bc1);
  const T bc2_sqrt = T(std::sqrt(bc2));
  const T b2 = T(c.beta2), w1 = T(1 - c.beta1), one_b2 = T(1 - c.beta2);
  const T eps = T(c.eps), wd = T(c.weight_decay);
  const T shrink = T(1.0 - c.lr * c.weight_decay);  // AdamW's decoupled decay factor
  const bool l2 = !c.decoupled && c.weight_decay != 0;
  const bool decoupled = c.decoupled && c.weight_decay != 0;
  // lerp(a, b, w) = a + w·(b − a), computed from the nearer end as PyTorch does (w < 0.5 in the
  // usual case β1 > 0.5).
  const bool low = c.beta1 > 0.5;
#pragma omp simd
  for (int64_t i = b; i < e; ++i) {
    T pi = decoupled ? p[i] * shrink : p[i];
    T gi = l2 ? g[i] + wd * pi : g[i];
    T mi = low ? m[i] + w1 * (gi - m[i]) : gi - (gi - m[i]) * (T(1) - w1);
    T vi = b2 * v[i] + one_b2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    T denom = std::sqrt(vi) / bc2_sqrt + eps;
    p[i] = pi - step_size * (mi / denom);
  }
}

void adam_step_cpu(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                   const std::vector<Tensor>& exp_avg, const std::vector<Tensor>& exp_avg_sq,
                   const std::vector<int64_t>& steps, const AdamConfig& config) {
  AdamConfig cfg = config;
  const double* s = step_scalars(config.scalars, 3, "adam_step");
  if (s) cfg.lr = s[0];
  for_each_chunk(params, 4, [&](size_t k, int64_t b, int64_t e) {
    double bc1 = s ? s[1] : 1.0 - std::pow(cfg.beta1, double(steps[k]));
    double bc2 = s ? s[2] : 1.0 - std::pow(cfg.beta2, double(steps[k]));
    dispatch_floating(params[k].dtype(), "adam_step", [&](auto tag) {
      using T = decltype(tag);
      adam_range<T>(ptr<T>(params[k]), ptr<T>(grads[k]), ptr<T>(exp_avg[k]), ptr<T>(exp_avg_sq[k]),
                    bc1, bc2, b, e, cfg);
    });
  });
}

}  // namespace

FREIGHT_REGISTER_KERNEL(kernels::sgd_step, CPU, sgd_step_cpu);
FREIGHT_REGISTER_KERNEL(kernels::adam_step, CPU, adam_step_cpu);

}  // namespace freight::cpu
