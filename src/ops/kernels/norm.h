// Kernel slots of batch normalisation. x and y are packed and viewed as [n, c, s] (s = the
// spatial size: 1 for [N, C], L for [N, C, L], H·W for [N, C, H, W]); the statistics and the
// affine parameters are packed [c] tensors of x's dtype. Tensor arguments marked optional may be
// undefined.
#pragma once
#include <cstdint>

#include "core/kernel.h"
#include "freight/tensor.h"

namespace freight::kernels {
// Per-channel batch statistics over n and s: mean, the biased variance (divided by n·s) and
// invstd = 1/√(var + eps).
FREIGHT_KERNEL(batch_norm_stats, void(const Tensor& x, int64_t n, int64_t c, int64_t s, double eps,
                                      Tensor& mean, Tensor& var, Tensor& invstd));
// In place: running_mean = (1 − momentum)·running_mean + momentum·mean, and running_var the same
// with the unbiased variance var·count/(count − 1).
FREIGHT_KERNEL(batch_norm_update_running,
               void(const Tensor& mean, const Tensor& var, double momentum, int64_t count,
                    Tensor& running_mean, Tensor& running_var));
// invstd = 1/√(var + eps) (evaluation, from the running variance).
FREIGHT_KERNEL(batch_norm_invstd, void(const Tensor& var, double eps, Tensor& invstd));
// y = (x − mean)·invstd·weight + bias; weight and bias optional (1 and 0). With `relu`, a ReLU
// fused after it: y = relu(that) (relu's own rule: v < 0 ? 0 : v, a NaN passes), in the same pass.
FREIGHT_KERNEL(batch_norm_forward,
               void(const Tensor& x, const Tensor& mean, const Tensor& invstd, const Tensor& weight,
                    const Tensor& bias, int64_t n, int64_t c, int64_t s, bool relu, Tensor& y));
// Gradients from gy, with x̂ = (x − mean)·invstd and m = n·s:
//   gbias = Σ gy,  gweight = Σ gy·x̂  (sums over n and s; each output optional),
//   gx = weight·invstd·(gy − (Σ gy + x̂·Σ gy·x̂)/m)   when `training` (mean and invstd were
//        computed from x, so they carry gradient too),
//   gx = weight·invstd·gy                            otherwise (running statistics).
// weight optional (1); gx optional. With `relu`, a ReLU was fused after the forward: gy is the
// gradient of its output y, and every gy above is read as gy·[y > 0] (relu's backward without a
// pass of its own), y recomputed from x with the forward's scale and shift (bias optional, 0).
FREIGHT_KERNEL(batch_norm_backward,
               void(const Tensor& gy, const Tensor& x, const Tensor& mean, const Tensor& invstd,
                    const Tensor& weight, const Tensor& bias, bool relu, bool training, int64_t n,
                    int64_t c, int64_t s, Tensor& gx, Tensor& gweight, Tensor& gbias));
}  // namespace freight::kernels
