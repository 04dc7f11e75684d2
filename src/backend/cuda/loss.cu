// CUDA kernels of the loss family. Batch means are deterministic: per-row (or per-block) values
// are written to a buffer of doubles and one block sums that buffer in a fixed order, so the
// loss does not depend on scheduling (no floating-point atomics).
//
// cross_entropy forward, per row of logits x [N, C] with label l:
//     m = max x,  s = Σ exp(x − m),  loss_row = log s − (x[l] − m),  probs = exp(x − m) / s
//   one block per row (threads_for_row(C) threads, grid-stride over rows) with block_reduce for
//   m and s; thread 0 checks the label and writes loss_row (double). A label outside [0, C) is
//   recorded as a deferred error (deferred_error.h) and its row's loss becomes NaN; the bad
//   label is never used as an address. Then one block of 256 threads sums the N row losses and
//   writes the mean.
// cross_entropy backward: grad = (probs − onehot(l)) · g / N with g the loss gradient, read
//   from device memory (no host round trip); one thread per element, 256 per block.
// mse_loss forward: a fixed grid (a function of numel only) of 256-thread blocks sums
//   (p − t)² in double over a grid-stride loop, one partial per block; one block sums those.
// mse_loss backward: one thread per element.
#include <algorithm>
#include <cmath>

#include "backend/cuda/block_reduce.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_context.h"
#include "backend/cuda/deferred_error.h"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/dispatch.h"
#include "ops/kernels/loss.h"

namespace freight::cuda {
namespace {

constexpr int kFinishThreads = 256;

// out[0] = (Σ values[0..count)) / divisor, summed by one block in a fixed order. count = 0
// gives 0 / divisor, and divisor = 0 gives NaN (the mean of nothing), as on the CPU.
template <class T>
__global__ void finish_mean_kernel(const double* values, int64_t count, double divisor, T* out) {
  __shared__ double scratch[32];
  double acc = 0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) acc += values[i];
  acc = block_reduce(acc, 0.0, SumOp{}, scratch);
  if (threadIdx.x == 0) out[0] = T(acc / divisor);
}

template <class T>
__global__ void cross_entropy_rows_kernel(const T* x, const int64_t* labels, int64_t rows,
                                          int64_t c, T* probs, double* row_loss,
                                          DeferredErrorSlot err) {
  __shared__ T scratch[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {  // uniform across the block
    const T* xr = x + r * c;
    T m = -T(INFINITY);
    for (int64_t j = threadIdx.x; j < c; j += blockDim.x) m = MaxOp{}(m, xr[j]);
    m = block_reduce(m, -T(INFINITY), MaxOp{}, scratch);
    T s = 0;
    for (int64_t j = threadIdx.x; j < c; j += blockDim.x) s += d_exp(xr[j] - m);
    s = block_reduce(s, T(0), SumOp{}, scratch);
    if (probs) {
      T inv = T(1) / s;
      T* pr = probs + r * c;
      for (int64_t j = threadIdx.x; j < c; j += blockDim.x) pr[j] = d_exp(xr[j] - m) * inv;
    }
    if (threadIdx.x == 0) {
      int64_t l = labels[r];
      if (l < 0 || l >= c) {
        report_deferred_error(err, DeferredKind::CrossEntropyLabel, l, r, c);
        row_loss[r] = __longlong_as_double(0x7ff8000000000000LL);  // NaN
      } else {
        row_loss[r] = double(d_log(s)) - double(xr[l] - m);
      }
    }
  }
}

void cross_entropy_forward_cuda(const Tensor& logits, const Tensor& labels, Tensor& probs,
                                Tensor& loss) {
  FREIGHT_CHECK(logits.dim() == 2 && logits.is_contiguous() && labels.is_contiguous() &&
                    labels.dtype() == DType::I64 && labels.numel() == logits.size(0) &&
                    (!probs.defined() || probs.is_contiguous()),
                "cross_entropy_forward (cuda): expects contiguous logits [N, C] and int64 "
                "labels [N]");
  int64_t n = logits.size(0), c = logits.size(1);
  int dev = loss.device().index;
  set_device(dev);
  cudaStream_t s = stream(dev);
  Tensor row_loss = Tensor::empty({n}, DType::F64, Device::cuda(dev));
  double* rl = static_cast<double*>(row_loss.data_ptr());
  DeferredErrorSlot err = deferred_error_slot(dev);
  dispatch_floating(logits.dtype(), "cross_entropy_forward", [&](auto tag) {
    using T = decltype(tag);
    if (n > 0) {
      cross_entropy_rows_kernel<T><<<blocks_for_rows(n), threads_for_row(c), 0, s>>>(
          static_cast<const T*>(logits.data_ptr()), static_cast<const int64_t*>(labels.data_ptr()),
          n, c, probs.defined() ? static_cast<T*>(probs.data_ptr()) : nullptr, rl, err);
      FREIGHT_CUDA_CHECK_LAUNCH();
    }
    finish_mean_kernel<T>
        <<<1, kFinishThreads, 0, s>>>(rl, n, double(n), static_cast<T*>(loss.data_ptr()));
    FREIGHT_CUDA_CHECK_LAUNCH();
  });
}

// grad[r, j] = probs[r, j]·k − (j == label[r] ? k : 0), k = g / N (the CPU's arithmetic: the
// product first, then k subtracted at the label). A bad label matches no column.
template <class T>
__global__ void cross_entropy_backward_kernel(const T* probs, const int64_t* labels,
                                              const T* grad_loss, int64_t rows, int64_t c,
                                              T* grad) {
  T k = T(double(grad_loss[0]) / double(rows));
  int64_t total = rows * c;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t r = i / c, j = i % c;
    T v = probs[i] * k;
    if (j == labels[r]) v -= k;
    grad[i] = v;
  }
}

void cross_entropy_backward_cuda(const Tensor& probs, const Tensor& labels, const Tensor& grad_loss,
                                 Tensor& grad_logits) {
  FREIGHT_CHECK(probs.dim() == 2 && probs.is_contiguous() && labels.is_contiguous() &&
                    labels.dtype() == DType::I64 && grad_loss.numel() == 1 &&
                    grad_loss.dtype() == probs.dtype() && grad_logits.is_contiguous(),
                "cross_entropy_backward (cuda): expects contiguous probs [N, C], int64 labels "
                "and a scalar loss gradient of the probs' dtype");
  int64_t n = probs.size(0), c = probs.size(1);
  if (n * c == 0) return;
  int dev = grad_logits.device().index;
  set_device(dev);
  dispatch_floating(probs.dtype(), "cross_entropy_backward", [&](auto tag) {
    using T = decltype(tag);
    cross_entropy_backward_kernel<T><<<blocks_for(n * c), 256, 0, stream(dev)>>>(
        static_cast<const T*>(probs.data_ptr()), static_cast<const int64_t*>(labels.data_ptr()),
        static_cast<const T*>(grad_loss.data_ptr()), n, c, static_cast<T*>(grad_logits.data_ptr()));
    FREIGHT_CUDA_CHECK_LAUNCH();
  });
}

// ---------------------------------------------------------------- mse_loss
constexpr unsigned kMseMaxBlocks = 1024;

template <class T>
__global__ void squared_error_partial_kernel(const T* p, const T* t, int64_t n, double* partial) {
  __shared__ double scratch[32];
  double acc = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    T d = p[i] - t[i];
    acc += double(d * d);  // squared in T, then accumulated in double, as the CPU
  }
  acc = block_reduce(acc, 0.0, SumOp{}, scratch);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

void mse_loss_forward_cuda(const Tensor& prediction, const Tensor& target, Tensor& loss) {
  FREIGHT_CHECK(
      prediction.is_contiguous() && target.is_contiguous() && prediction.numel() == target.numel(),
      "mse_loss_forward (cuda): operands must be contiguous and of the same size");
  int64_t n = prediction.numel();
  int dev = loss.device().index;
  set_device(dev);
  cudaStream_t s = stream(dev);
  // The grid depends on n alone, so the order of the sums (and the result) is reproducible.
  unsigned blocks = n > 0 ? std::min(blocks_for(n), kMseMaxBlocks) : 0;
  Tensor partial = Tensor::empty({int64_t(blocks)}, DType::F64, Device::cuda(dev));
  double* pp = static_cast<double*>(partial.data_ptr());
  dispatch_floating(prediction.dtype(), "mse_loss_forward", [&](auto tag) {
    using T = decltype(tag);
    if (blocks > 0) {
      squared_error_partial_kernel<T>
          <<<blocks, 256, 0, s>>>(static_cast<const T*>(prediction.data_ptr()),
                                  static_cast<const T*>(target.data_ptr()), n, pp);
      FREIGHT_CUDA_CHECK_LAUNCH();
    }
    finish_mean_kernel<T><<<1, kFinishThreads, 0, s>>>(pp, int64_t(blocks), double(n),
                                                       static_cast<T*>(loss.data_ptr()));
    FREIGHT_CUDA_CHECK_LAUNCH();
  });
}

// gp = k·(p − t) and gt = −gp, or gt = k·(t − p) alone, k = 2·g / numel (the CPU's forms).
template <class T>
__global__ void mse_backward_kernel(const T* p, const T* t, const T* grad_loss, int64_t n, T* gp,
                                    T* gt) {
  T k = T(2.0 * double(grad_loss[0]) / double(n));
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    if (gp) {
      T v = k * (p[i] - t[i]);
      gp[i] = v;
      if (gt) gt[i] = -v;
    } else {
      gt[i] = k * (t[i] - p[i]);
    }
  }
}

void mse_loss_backward_cuda(const Tensor& prediction, const Tensor& target, const Tensor& grad_loss,
                            Tensor& grad_prediction, Tensor& grad_target) {
  FREIGHT_CHECK(prediction.is_contiguous() && target.is_contiguous() && grad_loss.numel() == 1 &&
                    grad_loss.dtype() == prediction.dtype() &&
                    (!grad_prediction.defined() || grad_prediction.is_contiguous()) &&
                    (!grad_target.defined() || grad_target.is_contiguous()),
                "mse_loss_backward (cuda): operands must be contiguous, the loss gradient a "
                "scalar of the prediction's dtype");
  int64_t n = prediction.numel();
  if (n == 0 || (!grad_prediction.defined() && !grad_target.defined())) return;
  int dev = prediction.device().index;
  set_device(dev);
  dispatch_floating(prediction.dtype(), "mse_loss_backward", [&](auto tag) {
    using T = decltype(tag);
    mse_backward_kernel<T><<<blocks_for(n), 256, 0, stream(dev)>>>(
        static_cast<const T*>(prediction.data_ptr()), static_cast<const T*>(target.data_ptr()),
        static_cast<const T*>(grad_loss.data_ptr()), n,
        grad_prediction.defined() ? static_cast<T*>(grad_prediction.data_ptr()) : nullptr,
        grad_target.defined() ? static_cast<T*>(grad_target.data_ptr()) : nullptr);
    FREIGHT_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace

FREIGHT_REGISTER_KERNEL(kernels::cross_entropy_forward, CUDA, cross_entropy_forward_cuda);
FREIGHT_REGISTER_KERNEL(kernels::cross_entropy_backward, CUDA, cross_entropy_backward_cuda);
FREIGHT_REGISTER_KERNEL(kernels::mse_loss_forward, CUDA, mse_loss_forward_cuda);
FREIGHT_REGISTER_KERNEL(kernels::mse_loss_backward, CUDA, mse_loss_backward_cuda);

}  // namespace freight::cuda
