// CUDA kernels of batch normalisation on x viewed as [n, c, s], with the CPU's formulas
// (batch_norm_cpu.cpp). Element q of channel ch (q in [0, n·s)) is x[(i·c + ch)·s + j] with
// i = q / s, j = q % s.
//
// Statistics and the backward's sums are split over many blocks per channel (channel_reduce.cuh:
//   one block per part of a channel, a second launch combining the parts in order), so 64
//   channels still fill a GPU of 132 SMs. Each thread sums its elements in double, block_reduce
//   combines a part's partial sums in a fixed order, the parts are added in part order: results
//   are reproducible run to run. As on the CPU, the variance is computed from deviations
//   d = x − K with K the channel's first value: mean = K + Σd/m, Σ(x − mean)² = Σd² − (Σd)²/m
//   (clamped at 0, a NaN kept), var = that / m (biased), invstd = 1/√(var + eps).
//   The backward's second launch writes the weight and bias gradients and three coefficients
//   per channel, and a third writes gx, one thread per element.
// Forward: one thread per element, 256 per block, grid-stride: y = x·scale + shift with
//   scale = invstd·γ and shift = β − mean·scale formed in T as the CPU forms them.
// A fused ReLU (batch_norm_relu): the forward clamps y at 0 as it writes it; the backward reads
//   gy·[y > 0] wherever the plain one reads gy, with y recomputed from x by the forward's own
//   expression x·scale + shift (the same value, so the same sign).
// Running statistics and eval invstd: one thread per channel, 256 per block, in double.
#include <cmath>

#include "backend/cuda/block_reduce.cuh"
#include "backend/cuda/channel_reduce.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_context.h"
#include "backend/cuda/dispatch.h"
#include "backend/cuda/unary_rules.cuh"
#include "ops/kernels/norm.h"
#include "ops/kernels/typed_data.h"

namespace freight::cuda {
namespace {

// Part sums of Σd and Σd² (d = x − x[channel's first value]): partial[2·b], partial[2·b + 1]
// for block b = ch·parts + part.
template <class T>
__global__ void stats_parts_kernel(const T* x, int64_t n, int64_t c, int64_t s, ChannelSplit sp,
                                   double* partial) {
  __shared__ double scratch[32];
  const int64_t m = n * s;
  for (int64_t b = blockIdx.x; b < c * sp.parts; b += gridDim.x) {  // uniform across the block
    const int64_t ch = b / sp.parts, lo = (b % sp.parts) * sp.chunk;
    const int64_t hi = lo + sp.chunk < m ? lo + sp.chunk : m;
    const double shift = double(x[ch * s]);  // element q = 0 of the channel
    double sum_d = 0, sum_sq = 0;
    for (int64_t q = lo + threadIdx.x; q < hi; q += blockDim.x) {
      const double d = double(x[channel_offset(q, ch, c, s)]) - shift;
      sum_d += d;
      sum_sq += d * d;
    }
    sum_d = block_reduce(sum_d, 0.0, SumOp{}, scratch);
    sum_sq = block_reduce(sum_sq, 0.0, SumOp{}, scratch);
    if (threadIdx.x == 0) {
      partial[2 * b] = sum_d;
      partial[2 * b + 1] = sum_sq;
    }
  }
}

template <class T>
__global__ void stats_finish_kernel(const T* x, const double* partial, int64_t c, int64_t s,
                                    int64_t m, int64_t parts, double eps, T* mean, T* var,
                                    T* invstd) {
  for (int64_t ch = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; ch < c;
       ch += int64_t(gridDim.x) * blockDim.x) {
    double sum_d = 0, sum_sq = 0;
    for (int64_t p = 0; p < parts; ++p) {  // part order
      sum_d += partial[2 * (ch * parts + p)];
      sum_sq += partial[2 * (ch * parts + p) + 1];
    }
    const double md = double(m);
    const double mu = double(x[ch * s]) + sum_d / md;
    // Σ(x − mean)², clamped at 0 but keeping a NaN (fmax would drop it), as the CPU does.
    const double centred = sum_sq - sum_d * sum_d / md;
    const double sq = centred < 0 ? 0.0 : centred;
    const double v = sq / md;
    mean[ch] = T(mu);
    var[ch] = T(v);
    invstd[ch] = T(1.0 / sqrt(v + eps));
  }
}

void stats_cuda(const Tensor& x, int64_t n, int64_t c, int64_t s, double eps, Tensor& mean,
                Tensor& var, Tensor& invstd) {
  FREIGHT_CHECK(
      x.is_contiguous() && mean.is_contiguous() && var.is_contiguous() && invstd.is_contiguous(),
      "batch_norm_stats (cuda): operands must be contiguous");
  FREIGHT_CHECK(n * s > 0, "batch_norm_stats (cuda): a channel has no values");
  if (c == 0) return;
  const int dev = x.device().index;
  set_device(dev);
  const unsigned threads = threads_for_row(n * s);
  const ChannelSplit sp = channel_split(c, n * s, threads);
  Tensor partial = Tensor::empty({c * sp.parts * 2}, DType::F64, x.device());
  dispatch_floating(x.dtype(), "batch_norm_stats", [&](auto tag) {
    using T = decltype(tag);
    stats_parts_kernel<T><<<blocks_for_rows(c * sp.parts), threads, 0, stream(dev)>>>(
        static_cast<const T*>(x.data_ptr()), n, c, s, sp, mptr<double>(partial));
    FREIGHT_CUDA_CHECK_LAUNCH();
    stats_finish_kernel<T><<<blocks_for(c), 256, 0, stream(dev)>>>(
        static_cast<const T*>(x.data_ptr()), cptr<double>(partial), c, s, n * s, sp.parts, eps,
        mptr<T>(mean), mptr<T>(var), mptr<T>(invstd));
    FREIGHT_CUDA_CHECK_LAUNCH();
  });
}

template <class T>
__global__ void update_running_kernel(const T* mean, const T* var, double momentum, double unbias,
                                      int64_t c, T* running_mean, T* running_var) {
  for (int64_t ch = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; ch < c;
       ch += int64_t(gridDim.x) * blockDim.x) {
    running_mean[ch] = T((1 - momentum) * double(running_mean[ch]) + momentum * double(mean[ch]));
    running_var[ch] =
        T((1 - momentum) * double(running_var[ch]) + momentum * double(var[ch]) * unbias);
  }
}

void update_running_cuda(const Tensor& mean, const Tensor& var, double momentum, int64_t count,
                         Tensor& running_mean, Tensor& running_var) {
  FREIGHT_CHECK(mean.is_contiguous() && var.is_contiguous() && running_mean.is_contiguous() &&
                    running_var.is_contiguous(),
                "batch_norm_update_running (cuda): operands must be contiguous");
  const int64_t c = mean.numel();
  if (c == 0) return;
  const double unbias = double(count) / double(count - 1);  // Bessel's correction
  const int dev = running_mean.device().index;
  set_device(dev);
  dispatch_floating(mean.dtype(), "batch_norm_update_running", [&](auto tag) {
    using T = decltype(tag);
    update_running_kernel<T>
        <<<blocks_for(c), 256, 0, stream(dev)>>>(cptr<T>(mean), cptr<T>(var), momentum, unbias, c,
                                                 mptr<T>(running_mean), mptr<T>(running_var));
    FREIGHT_CUDA_CHECK_LAUNCH();
  });
}

template <class T>
__global__ void invstd_kernel(const T* var, double eps, int64_t c, T* invstd) {
  for (int64_t ch = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; ch < c;
       ch += int64_t(gridDim.x) * blockDim.x)
    invstd[ch] = T(1.0 / sqrt(double(var[ch]) + eps));
}

void invstd_cuda(const Tensor& var, double eps, Tensor& invstd) {
  FREIGHT_CHECK(var.is_contiguous() && invstd.is_contiguous(),
                "batch_norm_invstd (cuda): operands must be contiguous");
  const int64_t c = var.numel();
  if (c == 0) return;
  const int dev = invstd.device().index;
  set_device(dev);
  dispatch_floating(var.dtype(), "batch_norm_invstd", [&](auto tag) {
    using T = decltype(tag);
    invstd_kernel<T><<<blocks_for(c), 256, 0, stream(dev)>>>(cptr<T>(var), eps, c, mptr<T>(invstd));
    FREIGHT_CUDA_CHECK_LAUNCH();
  });
}

// weight and bias may be null (1 and 0).
template <class T>
__global__ void forward_kernel(const T* x, const T* mean, const T* invstd, const T* weight,
                               const T* bias, int64_t c, int64_t s, int64_t total, bool relu,
                               T* y) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t ch = (e / s) % c;
    const T scale = invstd[ch] * (weight ? weight[ch] : T(1));
    const T shift = (bias ? bias[ch] : T(0)) - mean[ch] * scale;
    const T v = x[e] * scale + shift;
    y[e] = relu ? relu_value(v) : v;  // relu's own rule
  }
}

void forward_cuda(const Tensor& x, const Tensor& mean, const Tensor& invstd, const Tensor& weight,
                  const Tensor& bias, int64_t n, int64_t c, int64_t s, bool relu, Tensor& y) {
  FREIGHT_CHECK(x.is_contiguous() && mean.is_contiguous() && invstd.is_contiguous() &&
                    (!weight.defined() || weight.is_contiguous()) &&
                    (!bias.defined() || bias.is_contiguous()) && y.is_contiguous(),
                "batch_norm_forward (cuda): operands must be contiguous");
  const int64_t total = n * c * s;
  if (total == 0) return;
  const int dev = y.device().index;
  set_device(dev);
  dispatch_floating(x.dtype(), "batch_norm_forward", [&](auto tag) {
    using T = decltype(tag);
    forward_kernel<T><<<blocks_for(total), 256, 0, stream(dev)>>>(
        cptr<T>(x), cptr<T>(mean), cptr<T>(invstd), cptr<T>(weight), cptr<T>(bias), c, s, total,
        relu, static_cast<T*>(y.data_ptr()));
    FREIGHT_CUDA_CHECK_LAUNCH();
  });
}

// gy where relu_passes(x·scale + shift) behind a fused ReLU (the forward's output and
// expression), else 0; gy itself without.
template <class T>
__device__ __forceinline__ T masked_grad(const T* gy, const T* x, bool relu, T scale, T shift,
                                         int64_t o) {
  return relu && !relu_passes(x[o] * scale + shift) ? T(0) : gy[o];
}

// The forward's scale and shift of channel ch (weight and bias may be null: 1 and 0).
template <class T>
__device__ __forceinline__ void scale_shift(const T* mean, const T* invstd, const T* weight,
                                            const T* bias, int64_t ch, T* scale, T* shift) {
  *scale = invstd[ch] * (weight ? weight[ch] : T(1));  // as forward_kernel
  *shift = (bias ? bias[ch] : T(0)) - mean[ch] * *scale;
}

// Part sums of Σgy and Σgy·(x − mean): partial[2·b], partial[2·b + 1] for block
// b = ch·parts + part. Bias is read only behind a fused ReLU.
template <class T>
__global__ void backward_parts_kernel(const T* gy, const T* x, const T* mean, const T* invstd,
                                      const T* weight, const T* bias, bool relu, int64_t n,
                                      int64_t c, int64_t s, ChannelSplit sp, double* partial) {
  __shared__ double scratch[32];
  const int64_t m = n * s;
  for (int64_t b = blockIdx.x; b < c * sp.parts; b += gridDim.x) {  // uniform across the block
    const int64_t ch = b / sp.parts, lo = (b % sp.parts) * sp.chunk;
    const int64_t hi = lo + sp.chunk < m ? lo + sp.chunk : m;
    const double mu = double(mean[ch]);
    T scale, shift;
    scale_shift(mean, invstd, weight, bias, ch, &scale, &shift);
    double sum_dy = 0, sum_dy_xc = 0;
    for (int64_t q = lo + threadIdx.x; q < hi; q += blockDim.x) {
      const int64_t o = channel_offset(q, ch, c, s);
      const double g = double(masked_grad(gy, x, relu, scale, shift, o));
      sum_dy += g;
      sum_dy_xc += g * (double(x[o]) - mu);
    }
    sum_dy = block_reduce(sum_dy, 0.0, SumOp{}, scratch);
    sum_dy_xc = block_reduce(sum_dy_xc, 0.0, SumOp{}, scratch);
    if (threadIdx.x == 0) {
      partial[2 * b] = sum_dy;
      partial[2 * b + 1] = sum_dy_xc;
    }
  }
}

// Per channel: the weight and bias gradients (when wanted) and gx's coefficients
// coef[3·ch..] = {A, −B, C}. With A = γ·invstd: gx = A·gy in evaluation; in training (x̂
// depends on x through the batch mean and invstd too) gx = A·gy − B·x + C with
// B = A·invstd²·Σ(gy·(x − mean))/m and C = B·mean − A·Σgy/m, the CPU's expansion.
template <class T>
__global__ void backward_finish_kernel(const double* partial, const T* mean, const T* invstd,
                                       const T* weight, bool training, bool sums, int64_t c,
                                       int64_t m, int64_t parts, double* coef, T* gweight,
                                       T* gbias) {
  for (int64_t ch = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; ch < c;
       ch += int64_t(gridDim.x) * blockDim.x) {
    double sum_dy = 0, sum_dy_xc = 0;
    if (sums)
      for (int64_t p = 0; p < parts; ++p) {  // part order
        sum_dy += partial[2 * (ch * parts + p)];
        sum_dy_xc += partial[2 * (ch * parts + p) + 1];
      }
    const double is = double(invstd[ch]);
    if (gweight) gweight[ch] = T(sum_dy_xc * is);  // Σ gy·x̂
    if (gbias) gbias[ch] = T(sum_dy);
    const double md = double(m), mu = double(mean[ch]);
    const double A = is * (weight ? double(weight[ch]) : 1.0);
    const double B = training ? A * is * is * sum_dy_xc / md : 0.0;
    const double C = training ? B * mu - A * sum_dy / md : 0.0;
    coef[3 * ch] = A;
    coef[3 * ch + 1] = -B;
    coef[3 * ch + 2] = C;
  }
}

template <class T>
__global__ void backward_input_kernel(const T* gy, const T* x, const T* mean, const T* invstd,
                                      const T* weight, const T* bias, bool relu, const double* coef,
                                      int64_t c, int64_t s, int64_t total, T* gx) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t ch = (e / s) % c;
    T scale, shift;
    scale_shift(mean, invstd, weight, bias, ch, &scale, &shift);
    const T ka = T(coef[3 * ch]), kb = T(coef[3 * ch + 1]), kc = T(coef[3 * ch + 2]);
    gx[e] = ka * masked_grad(gy, x, relu, scale, shift, e) + kb * x[e] + kc;
  }
}

void backward_cuda(const Tensor& gy, const Tensor& x, const Tensor& mean, const Tensor& invstd,
                   const Tensor& weight, const Tensor& bias, bool relu, bool training, int64_t n,
                   int64_t c, int64_t s, Tensor& gx, Tensor& gweight, Tensor& gbias) {
  FREIGHT_CHECK(gy.is_contiguous() && x.is_contiguous() && mean.is_contiguous() &&
                    invstd.is_contiguous() && (!weight.defined() || weight.is_contiguous()) &&
                    (!bias.defined() || bias.is_contiguous()) &&
                    (!gx.defined() || gx.is_contiguous()) &&
                    (!gweight.defined() || gweight.is_contiguous()) &&
                    (!gbias.defined() || gbias.is_contiguous()),
                "batch_norm_backward (cuda): operands must be contiguous");
  // Σgy and Σgy·(x − mean) are needed for a training gx and for the parameters' gradients.
  const bool sums = (training && gx.defined()) || gweight.defined() || gbias.defined();
  if (c == 0 || (!gx.defined() && !sums)) return;
  const int dev = gy.device().index;
  set_device(dev);
  const int64_t m = n * s;
  const unsigned threads = threads_for_row(m);
  const ChannelSplit sp = channel_split(c, m, threads);
  Tensor partial = sums ? Tensor::empty({c * sp.parts * 2}, DType::F64, gy.device()) : Tensor();
  Tensor coef = Tensor::empty({c * 3}, DType::F64, gy.device());
  dispatch_floating(gy.dtype(), "batch_norm_backward", [&](auto tag) {
    using T = decltype(tag);
    if (sums && m > 0) {
      backward_parts_kernel<T><<<blocks_for_rows(c * sp.parts), threads, 0, stream(dev)>>>(
          cptr<T>(gy), cptr<T>(x), cptr<T>(mean), cptr<T>(invstd), cptr<T>(weight), cptr<T>(bias),
          relu, n, c, s, sp, mptr<double>(partial));
      FREIGHT_CUDA_CHECK_LAUNCH();
    }
    backward_finish_kernel<T><<<blocks_for(c), 256, 0, stream(dev)>>>(
        sums && m > 0 ? cptr<double>(partial) : nullptr, cptr<T>(mean), cptr<T>(invstd),
        cptr<T>(weight), training, sums && m > 0, c, m, sp.parts, mptr<double>(coef),
        mptr<T>(gweight), mptr<T>(gbias));
    FREIGHT_CUDA_CHECK_LAUNCH();
    if (gx.defined() && m > 0) {
      backward_input_kernel<T><<<blocks_for(n * c * s), 256, 0, stream(dev)>>>(
          cptr<T>(gy), cptr<T>(x), cptr<T>(mean), cptr<T>(invstd), cptr<T>(weight), cptr<T>(bias),
          relu, cptr<double>(coef), c, s, n * c * s, mptr<T>(gx));
      FREIGHT_CUDA_CHECK_LAUNCH();
    }
  });
}

}  // namespace

FREIGHT_REGISTER_KERNEL(kernels::batch_norm_stats, CUDA, stats_cuda);
FREIGHT_REGISTER_KERNEL(kernels::batch_norm_update_running, CUDA, update_running_cuda);
FREIGHT_REGISTER_KERNEL(kernels::batch_norm_invstd, CUDA, invstd_cuda);
FREIGHT_REGISTER_KERNEL(kernels::batch_norm_forward, CUDA, forward_cuda);
FREIGHT_REGISTER_KERNEL(kernels::batch_norm_backward, CUDA, backward_cuda);

}  // namespace freight::cuda
