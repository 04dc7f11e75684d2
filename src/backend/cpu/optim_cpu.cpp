// CPU kernels of the optimizers. The parameters of a step are cut into chunks of a few thousand
// elements and the chunks spread over the threads, so one call balances many small tensors (biases)
// and a few large ones (weights) alike; each chunk is a vectorised loop.
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backend/cpu/dispatch.h"
#include "backend/cpu/parallel.h"
#include "backend/cpu/sgemm_call.h"
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
                            : std::max<int64_t>(1, elementwise_grain() / kChunk);
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
void sgd_range(T* p, const T* g, T* buf, bool fresh, int64_t b, int64_t e, double learning_rate,
               const SgdConfig& c) {
  const T lr = T(learning_rate), wd = T(c.weight_decay), mu = T(c.momentum),
          keep = T(1 - c.dampening);
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

// Checks the counters (ops/kernels/optim.h), advances the step count of every parameter of the
// call and returns the counts after this update, in the call's order.
std::vector<int64_t> advance_steps(const StepCounters& c, size_t params, const char* kernel) {
  FREIGHT_CHECK(c.lr.defined() && c.lr.dtype() == DType::F64 && c.lr.numel() == 1 &&
                    c.step_counts.defined() && c.step_counts.dtype() == DType::I64 &&
                    c.step_counts.is_contiguous() && c.slot.size() == params,
                std::string(kernel) +
                    " (cpu): the counters must be a float64 lr [1], contiguous int64 step counts "
                    "and one slot per parameter");
  int64_t* counts = c.step_counts.data<int64_t>();
  std::vector<int64_t> t(params);
  for (size_t k = 0; k < params; ++k) {
    FREIGHT_CHECK(c.slot[k] >= 0 && c.slot[k] < c.step_counts.numel(),
                  std::string(kernel) + " (cpu): step-count slot out of range");
    t[k] = ++counts[c.slot[k]];
  }
  return t;
}

void sgd_step_cpu(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                  const std::vector<Tensor>& momentum, const std::vector<uint8_t>& fresh,
                  const StepCounters& counters, const SgdConfig& cfg) {
  advance_steps(counters, params.size(), "sgd_step");
  const double lr = *counters.lr.data<double>();
  bool with_buffers = !momentum.empty();
  for_each_chunk(params, with_buffers ? 3 : 2, [&](size_t k, int64_t b, int64_t e) {
    dispatch_floating(params[k].dtype(), "sgd_step", [&](auto tag) {
      using T = decltype(tag);
      sgd_range<T>(ptr<T>(params[k]), ptr<T>(grads[k]),
                   with_buffers ? ptr<T>(momentum[k]) : nullptr, with_buffers && fresh[k], b, e, lr,
                   cfg);
    });
  });
}

// ---------------------------------------------------------------- SGD inside a linear backward
// The weight gradient g = gyᵀ·x of a layer with few rows (a small batch) costs little to compute
// and a lot to move: written out by the product, then read back by sgd_step beside p and the
// momentum buffer. Here each thread computes a band of g's rows into a scratch band that stays
// in its core's cache and updates the same rows of p and the buffer at once, so g never reaches
// memory. Each band's product is single-threaded and reads all of x again, which is why the
// rows are capped. fcn5's 2048 -> 4096 layer with SGD's momentum, its product and update fused
// against apart (Zen 4, 2 threads, oneDNN's sgemm in both): 1.1-1.25x faster with 64 rows,
// 0.9-1.0x with 128, 0.87x with 256; its 4096 -> 1024 layer 1.1x with 64 rows. On a busy host
// some runs of the 64-row case came out at 0.85-0.95x. Layers whose weights a core's caches
// hold have nothing to gain.
constexpr int64_t kFusedMaxRows = 64;
constexpr int64_t kFusedMinWeights = int64_t(1) << 20;
constexpr int64_t kFusedBandFloats = int64_t(128) << 10;  // 512 KiB of g per band

bool sgd_step_linear_weight_cpu(const Tensor& gy, const Tensor& x, const Tensor& p,
                                const Tensor& momentum, bool fresh, const StepCounters& counters,
                                const SgdConfig& cfg) {
  if (p.dtype() != DType::F32 || gy.dtype() != DType::F32 || x.dtype() != DType::F32) return false;
  FREIGHT_CHECK(
      p.dim() == 2 && gy.dim() == 2 && x.dim() == 2 && gy.size(0) == x.size(0) &&
          gy.size(1) == p.size(0) && x.size(1) == p.size(1) && p.is_contiguous() &&
          gy.is_contiguous() && x.is_contiguous() &&
          (!momentum.defined() || (momentum.shape() == p.shape() && momentum.dtype() == p.dtype() &&
                                   momentum.is_contiguous())),
      fmt::format("sgd_step_linear_weight (cpu): the weight {} takes a contiguous "
                  "output gradient [rows, {}] and input [rows, {}], got {} and {}",
                  shape_str(p.shape()), p.dim() == 2 ? p.size(0) : -1,
                  p.dim() == 2 ? p.size(1) : -1, shape_str(gy.shape()), shape_str(x.shape())));
  const int64_t rows = gy.size(0), out = p.size(0), in = p.size(1);
  if (rows > kFusedMaxRows || out * in < kFusedMinWeights) return false;
  advance_steps(counters, 1, "sgd_step_linear_weight");
  const double lr = *counters.lr.data<double>();
  const int64_t band = std::clamp<int64_t>(kFusedBandFloats / in, 1, out);
  const int64_t bands = (out + band - 1) / band;
  const int threads = int(std::min<int64_t>(omp_in_parallel() ? 1 : omp_get_max_threads(), bands));
  Tensor scratch = Tensor::empty({threads * band * in}, DType::F32, Device::cpu());
  const float* a = gy.data<float>();
  const float* b = x.data<float>();
  float* pp = p.data<float>();
  float* mp = momentum.defined() ? momentum.data<float>() : nullptr;
  float* const scratch_base = scratch.data<float>();
#pragma omp parallel num_threads(threads)
  {
    float* g = scratch_base + omp_get_thread_num() * band * in;
#pragma omp for schedule(static, 1)
    for (int64_t j = 0; j < bands; ++j) {
      const int64_t r0 = j * band, r = std::min(band, out - r0);
      // g[r0 .. r0 + r) = (gy's columns r0 .. r0 + r)ᵀ · x
      sgemm(true, false, r, in, rows, 1.0f, a + r0, out, b, in, 0.0f, g, in);
      sgd_range<float>(pp + r0 * in, g, mp ? mp + r0 * in : nullptr, fresh, 0, r * in, lr, cfg);
    }
  }
  return true;
}

// ---------------------------------------------------------------- Adam / AdamW
template <class T>
void adam_range(T* p, const T* g, T* m, T* v, double lr, double bc1, double bc2, int64_t b,
                int64_t e, const AdamConfig& c) {
  // Bias corrections: m and v start at 0, so after t updates E[m] = (1 − β1ᵗ)·E[g]; dividing by
  // bc1 = 1 − β1ᵗ (and √bc2 = √(1 − β2ᵗ) for √v) removes that shrinkage. Folded into the step
  // size and the denominator in PyTorch's order of operations:
  //   m = lerp(m, g, 1 − β1);  v = β2·v + (1 − β2)·g·g
  //   p = p − (lr / bc1) · (m / (√v / √bc2 + ε))
  const T step_size = T(lr / bc1);
  const T bc2_sqrt = T(std::sqrt(bc2));
  const T b2 = T(c.beta2), w1 = T(1 - c.beta1), one_b2 = T(1 - c.beta2);
  const T eps = T(c.eps), wd = T(c.weight_decay);
  const T shrink = T(1.0 - lr * c.weight_decay);  // AdamW's decoupled decay factor
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
                   const StepCounters& counters, const AdamConfig& cfg) {
  const std::vector<int64_t> steps = advance_steps(counters, params.size(), "adam_step");
  const double lr = *counters.lr.data<double>();
  for_each_chunk(params, 4, [&](size_t k, int64_t b, int64_t e) {
    double bc1 = 1.0 - std::pow(cfg.beta1, double(steps[k]));
    double bc2 = 1.0 - std::pow(cfg.beta2, double(steps[k]));
    dispatch_floating(params[k].dtype(), "adam_step", [&](auto tag) {
      using T = decltype(tag);
      adam_range<T>(ptr<T>(params[k]), ptr<T>(grads[k]), ptr<T>(exp_avg[k]), ptr<T>(exp_avg_sq[k]),
                    lr, bc1, bc2, b, e, cfg);
    });
  });
}

}  // namespace

FREIGHT_REGISTER_KERNEL(kernels::sgd_step, CPU, sgd_step_cpu);
FREIGHT_REGISTER_KERNEL(kernels::sgd_step_linear_weight, CPU, sgd_step_linear_weight_cpu);
FREIGHT_REGISTER_KERNEL(kernels::adam_step, CPU, adam_step_cpu);

}  // namespace freight::cpu
