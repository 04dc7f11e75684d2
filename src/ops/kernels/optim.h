// Kernel slots of the optimizers: one call updates every parameter of a step (a CUDA backend
// implements each as one fused multi-tensor launch). All vectors are parallel (entry k of each
// belongs to parameter k); every tensor is contiguous, and each parameter's gradient and state
// buffers share its shape, dtype and device. Parameters and buffers are updated in place.
#pragma once
#include <cstdint>
#include <vector>

#include "core/kernel.h"
#include "freight/tensor.h"

namespace freight {

// The counters an update reads and advances where it runs, on the parameters' device, so that no
// step waits for the host and a step captured into a CUDA graph replays with the current values
// (a launch bakes in its arguments; these are read through addresses that never change):
//   lr           float64 [1]: the learning rate (Optimizer::set_lr writes it, in stream order)
//   step_counts  int64 [P]: the updates applied so far to each of the optimizer's P parameters
//   slot[k]      the entry of step_counts that belongs to parameter k of the call
// A kernel first adds 1 to step_counts[slot[k]] for every k of the call, then updates parameter
// k with t = that count. Everything derived from them is computed in double where the kernel
// runs, before the cast to the parameter's type: SGD's lr, Adam's step size lr / (1 − β1ᵗ) and
// √(1 − β2ᵗ), AdamW's shrink 1 − lr·wd.
struct StepCounters {
  Tensor lr;
  Tensor step_counts;
  std::vector<int32_t> slot;
};

struct SgdConfig {
  double momentum = 0;  // 0: no buffers (the momentum vector is empty)
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
};

struct AdamConfig {
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;
  bool decoupled = false;  // AdamW: p ← p·(1 − lr·wd) first; Adam: g ← g + wd·p
};

namespace kernels {
// d = g + wd·p; with momentum: b = d where fresh[k] (a buffer just created), else
// b = μ·b + (1 − dampening)·d, then d = d + μ·b (nesterov) or d = b; finally p = p − lr·d.
FREIGHT_KERNEL(sgd_step,
               void(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                    const std::vector<Tensor>& momentum, const std::vector<uint8_t>& fresh,
                    const StepCounters& counters, const SgdConfig& cfg));
// sgd_step for one linear layer's weight p [out, in] whose gradient g = gyᵀ·x (gy [rows, out],
// x [rows, in], contiguous) is never stored: the update runs band of rows of p by band while the
// band of g just computed is in cache (Optimizer::set_fused_backward). `momentum` is undefined
// without momentum. Returns false, having done nothing, for shapes where the backend measured
// the fusion slower than the product and sgd_step apart.
FREIGHT_KERNEL(sgd_step_linear_weight,
               bool(const Tensor& gy, const Tensor& x, const Tensor& param, const Tensor& momentum,
                    bool fresh, const StepCounters& counters, const SgdConfig& cfg));
// The bias corrections 1 − β1ᵗ and 1 − β2ᵗ use each parameter's count t after this update
// (>= 1). exp_avg (m) and exp_avg_sq (v) start at zero.
FREIGHT_KERNEL(adam_step,
               void(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                    const std::vector<Tensor>& exp_avg, const std::vector<Tensor>& exp_avg_sq,
                    const StepCounters& counters, const AdamConfig& cfg));
}  // namespace kernels
}  // namespace freight
