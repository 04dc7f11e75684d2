// CPU kernels of dropout. Random bits are drawn a block of Philox counters at a time into a
// stack buffer (philox_block.h: each SIMD lane runs the ten rounds for its own counter), then a
// SIMD loop applies the mask.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "backend/cpu/dispatch.h"
#include "backend/cpu/parallel.h"
#include "backend/cpu/philox_block.h"
#include "ops/kernels/dropout.h"

namespace freight::cpu {
namespace {

constexpr int64_t kCounters = 64;  // Philox counters per block (4 elements each)

void dropout_forward_cpu(const Tensor& x, double p, uint64_t seed, uint64_t offset, Tensor& y,
                         Tensor& mask) {
  // u = (bits >> 8) / 2^24 exactly, so u >= p  <=>  (bits >> 8) >= ceil(p · 2^24): the same
  // decision as comparing the float, made on integers.
  uint32_t threshold = uint32_t(std::ceil(p * 16777216.0));
  double scale = p < 1.0 ? 1.0 / (1.0 - p) : 0.0;
  int64_t n = x.numel();
  uint8_t* m = mask.defined() ? mask.data<uint8_t>() : nullptr;
  dispatch_floating(x.dtype(), "dropout_forward", [&](auto tag) {
    using T = decltype(tag);
    const T* px = static_cast<const T*>(x.data_ptr());
    T* py = static_cast<T*>(y.data_ptr());
    T s = T(scale);
    int64_t counters = (n + 3) / 4;
    int64_t blocks = (counters + kCounters - 1) / kCounters;
    parallel_for(blocks, std::max<int64_t>(1, elementwise_grain() / (4 * kCounters)),
                 [&](int64_t b0, int64_t b1) {
                   uint32_t bits[4 * kCounters];
                   for (int64_t b = b0; b < b1; ++b) {
                     int64_t c0 = b * kCounters;
                     int64_t nc = std::min(kCounters, counters - c0);
                     philox_block(seed, offset + uint64_t(c0), nc, bits);
                     int64_t e0 = 4 * c0, ne = std::min(4 * nc, n - e0);
                     const T* xb = px + e0;
                     T* yb = py + e0;
        // x times s or times 0, as PyTorch multiplies by the mask: a dropped NaN
        // or infinity gives NaN, not 0 (and a dropped negative value -0). Both
        // products are formed and one is selected, so the loop vectorises (the
        // factor selected first, x * (keep ? s : 0), made it 4 times slower).
#pragma omp simd
                     for (int64_t i = 0; i < ne; ++i) {
                       const T kept = xb[i] * s, dropped = xb[i] * T(0);
                       yb[i] = (bits[i] >> 8) >= threshold ? kept : dropped;
                     }
                     if (m) {
                       // A loop of its own, over a local copy of the threshold: a byte store
                       // may alias anything, and GCC kept the loop scalar when it shared the
                       // float store's loop or read the threshold captured by reference.
                       uint8_t* mb = m + e0;
                       const uint32_t cut = threshold;
#pragma omp simd
                       for (int64_t i = 0; i < ne; ++i) mb[i] = uint8_t((bits[i] >> 8) >= cut);
                     }
                   }
                 });
  });
}

void dropout_backward_cpu(const Tensor& grad_y, const Tensor& mask, double scale, Tensor& grad_x) {
  const uint8_t* m = mask.data<uint8_t>();
  dispatch_floating(grad_x.dtype(), "dropout_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* g = static_cast<const T*>(grad_y.data_ptr());
    T* gx = static_cast<T*>(grad_x.data_ptr());
    T s = T(scale);
    parallel_for(grad_x.numel(), elementwise_grain(), [&](int64_t b, int64_t e) {
#pragma omp simd
      for (int64_t i = b; i < e; ++i) {  // as the forward
        const T kept = g[i] * s, dropped = g[i] * T(0);
        gx[i] = m[i] ? kept : dropped;
      }
    });
  });
}

}  // namespace

FREIGHT_REGISTER_KERNEL(kernels::dropout_forward, CPU, dropout_forward_cpu);
FREIGHT_REGISTER_KERNEL(kernels::dropout_backward, CPU, dropout_backward_cpu);

}  // namespace freight::cpu
