// CUDA kernels of the LSTM family: the fused cells, one step at a time. The CUDA backend
// registers only these two slots, so the op (src/ops/lstm.cpp) runs the time loop on the host
// and queues on the device's stream exactly the GPU plan:
//   forward:  the input projections of all steps as one cuBLAS GEMM ([T·B, I]·W_ihᵀ), then per
//             step one GEMM (+= h_{t-1}·W_hhᵀ, accumulated in place) and one cell kernel;
//   backward: per step one cell-backward kernel and one GEMM (dh_{t-1} = dA_t·W_hh), then the
//             weight gradients as one GEMM over all steps ([X | H_prev]ᵀ·dA), dX = dA·W_ih as
//             one GEMM, and the bias gradient as one column sum.
// Nothing here waits for the device, so the host runs ahead and the steps queue back to back.
//
// Both kernels: one thread per hidden unit (row r, unit j) of the step, 256 per block,
// grid-stride over B·H. The four gates of a unit lie H apart in its row of `gates`, so adjacent
// threads (adjacent j) read and write adjacent addresses in each of the four gate blocks.
// Gate order (i, f, g, o), PyTorch's; the equations are those of lstm_cpu.cpp.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_context.h"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/dispatch.h"
#include "ops/kernels/lstm.h"

namespace freight::cuda {
namespace {

template <class T>
__device__ __forceinline__ T sigmoid_of(T x) {
  return T(1) / (T(1) + d_exp(-x));  // exp(−x) = inf for very negative x gives exactly 0
}

// gates [B, 4H]: in, pre-activations without the bias; out, the activations i, f, g, o.
// c = f⊙c_prev + i⊙g, h = o⊙tanh(c).
template <class T>
__global__ void cell_forward_kernel(T* gates, const T* bias, const T* c_prev, int64_t B, int64_t H,
                                    T* c, T* h) {
  const int64_t total = B * H;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = e / H, j = e % H;
    T* a = gates + r * 4 * H;
    const T i = sigmoid_of(a[j] + bias[j]);
    const T f = sigmoid_of(a[H + j] + bias[H + j]);
    const T g = d_tanh(a[2 * H + j] + bias[2 * H + j]);
    const T o = sigmoid_of(a[3 * H + j] + bias[3 * H + j]);
    const T cn = f * c_prev[e] + i * g;
    a[j] = i;
    a[H + j] = f;
    a[2 * H + j] = g;
    a[3 * H + j] = o;
    c[e] = cn;
    h[e] = o * d_tanh(cn);
  }
}

// With dh = dh_out + dh_next and τ = tanh(c) (recomputed):
//   dc_total = dc + dh⊙o⊙(1 − τ²)
//   d(pre-act) of i = dc_total⊙g⊙i(1 − i),  f = dc_total⊙c_prev⊙f(1 − f),
//                 g = dc_total⊙i⊙(1 − g²),   o = dh⊙τ⊙o(1 − o)
//   dc_prev = dc_total⊙f, written over dc (each thread reads its dc element before writing it).
template <class T>
__global__ void cell_backward_kernel(const T* gates, const T* c_prev, const T* c, const T* dh_out,
                                     const T* dh_next, int64_t B, int64_t H, T* dc, T* dgates) {
  const int64_t total = B * H;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = e / H, j = e % H;
    const T* a = gates + r * 4 * H;
    T* da = dgates + r * 4 * H;
    const T i = a[j], f = a[H + j], g = a[2 * H + j], o = a[3 * H + j];
    const T tc = d_tanh(c[e]);
    const T dh = dh_out[e] + dh_next[e];
    const T dct = dc[e] + dh * o * (T(1) - tc * tc);
    da[j] = dct * g * i * (T(1) - i);
    da[H + j] = dct * c_prev[e] * f * (T(1) - f);
    da[2 * H + j] = dct * i * (T(1) - g * g);
    da[3 * H + j] = dh * tc * o * (T(1) - o);
    dc[e] = dct * f;
  }
}

void cell_forward_cuda(Tensor& gates, const Tensor& bias, const Tensor& c_prev, Tensor& c,
                       Tensor& h) {
  FREIGHT_CHECK(gates.is_contiguous() && bias.is_contiguous() && c_prev.is_contiguous() &&
                    c.is_contiguous() && h.is_contiguous(),
                "lstm_cell_forward (cuda): operands must be contiguous");
  FREIGHT_CHECK(gates.dim() == 2 && gates.size(1) % 4 == 0,
                "lstm_cell_forward (cuda): gates must be [B, 4H]");
  const int64_t B = gates.size(0), H = gates.size(1) / 4;
  FREIGHT_CHECK(
      bias.numel() == 4 * H && c_prev.numel() == B * H && c.numel() == B * H && h.numel() == B * H,
      "lstm_cell_forward (cuda): bias must have 4H elements and the states B·H");
  if (B * H == 0) return;
  const int dev = gates.device().index;
  set_device(dev);
  dispatch_floating(gates.dtype(), "lstm_cell_forward", [&](auto tag) {
    using T = decltype(tag);
    cell_forward_kernel<T><<<blocks_for(B * H), 256, 0, stream(dev)>>>(
        static_cast<T*>(gates.data_ptr()), static_cast<const T*>(bias.data_ptr()),
        static_cast<const T*>(c_prev.data_ptr()), B, H, static_cast<T*>(c.data_ptr()),
        static_cast<T*>(h.data_ptr()));
    FREIGHT_CUDA_CHECK_LAUNCH();
  });
}

void cell_backward_cuda(const Tensor& gates, const Tensor& c_prev, const Tensor& c,
                        const Tensor& dh_out, const Tensor& dh_next, Tensor& dc, Tensor& dgates) {
  FREIGHT_CHECK(gates.is_contiguous() && c_prev.is_contiguous() && c.is_contiguous() &&
                    dh_out.is_contiguous() && dh_next.is_contiguous() && dc.is_contiguous() &&
                    dgates.is_contiguous(),
                "lstm_cell_backward (cuda): operands must be contiguous");
  FREIGHT_CHECK(gates.dim() == 2 && gates.size(1) % 4 == 0,
                "lstm_cell_backward (cuda): gates must be [B, 4H]");
  const int64_t B = gates.size(0), H = gates.size(1) / 4;
  FREIGHT_CHECK(c_prev.numel() == B * H && c.numel() == B * H && dh_out.numel() == B * H &&
                    dh_next.numel() == B * H && dc.numel() == B * H && dgates.numel() == 4 * B * H,
                "lstm_cell_backward (cuda): the states must have B·H elements, dgates 4·B·H");
  if (B * H == 0) return;
  const int dev = dgates.device().index;
  set_device(dev);
  dispatch_floating(gates.dtype(), "lstm_cell_backward", [&](auto tag) {
    using T = decltype(tag);
    cell_backward_kernel<T><<<blocks_for(B * H), 256, 0, stream(dev)>>>(
        static_cast<const T*>(gates.data_ptr()), static_cast<const T*>(c_prev.data_ptr()),
        static_cast<const T*>(c.data_ptr()), static_cast<const T*>(dh_out.data_ptr()),
        static_cast<const T*>(dh_next.data_ptr()), B, H, static_cast<T*>(dc.data_ptr()),
        static_cast<T*>(dgates.data_ptr()));
    FREIGHT_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace

FREIGHT_REGISTER_KERNEL(kernels::lstm_cell_forward, CUDA, cell_forward_cuda);
FREIGHT_REGISTER_KERNEL(kernels::lstm_cell_backward, CUDA, cell_backward_cuda);

}  // namespace freight::cuda
