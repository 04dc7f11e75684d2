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

// Step scalars (CUDA graphs). A kernel launch bakes in its arguments, so a step() captured into
// a CUDA graph would replay the learning rate and bias corrections of the captured step
// forever. When `scalars` is defined (a contiguous float64 tensor on the parameters' device),
// the kernels read those values from it at run time instead, and ignore the fields they
// replace (`lr`, and for Adam the step counts):
//   scalars[0] = lr
//   scalars[1] = 1 − β1ᵗ, scalars[2] = 1 − β2ᵗ   (Adam: bias corrections of this update's t)
// Every quantity derived from them is computed as in the plain case, in double before the cast
// to the parameter's type: step_size = lr / bc1, √bc2, AdamW's shrink 1 − lr·wd, SGD's lr·d.
// So a kernel given scalars produces bit-identical results to one given the same values in the
// config. Optimizer::use_step_scalars (optimizer.h) fills the tensor before each step.
struct SgdConfig {
  double lr = 0;
  double momentum = 0;  // 0: no buffers (the momentum vector is empty)
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
  Tensor scalars;  // optional: {lr} read at run time (see above)
};

struct AdamConfig {
  double lr = 0;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;
  bool decoupled = false;  // AdamW: p ← p·(1 − lr·wd) first; Adam: g ← g + wd·p
  Tensor scalars;  // optional: {lr, 1 − β1ᵗ, 1 − β2ᵗ} read at run time (see above)
};

namespace kernels {
// d = g + wd·p; with momentum: b = d where fresh[k] (a buffer just created), else
// b = μ·b + (1 − dampening)·d, then d = d + μ·b (nesterov) or d = b; finally p = p − lr·d.
FREIGHT_KERNEL(sgd_step, void(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                              const std::vector<Tensor>& momentum,
                              const std::vector<uint8_t>& fresh, const SgdConfig& cfg));
// steps[k]: parameter k's step count t including this update (>= 1), for the bias corrections
// 1 − β1ᵗ and 1 − β2ᵗ (taken from cfg.scalars instead when it is defined). exp_avg (m) and
// exp_avg_sq (v) start at zero.
FREIGHT_KERNEL(adam_step,
               void(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                    const std::vector<Tensor>& exp_avg, const std::vector<Tensor>& exp_avg_sq,
                    const std::vector<int64_t>& steps, const AdamConfig& cfg));
}  // namespace kernels
}  // namespace freight
