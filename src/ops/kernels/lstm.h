// Kernel slots of the LSTM family. The op (src/ops/lstm.cpp) keeps every per-step buffer
// time-major so that one step's slice is a packed [B, ·] block:
//   gates [T, B, 4H]   pre-activations, then the activations (i, f, g, o) saved for backward
//   hs    [T+1, B, H]  hs[0] = h0, hs[t+1] = h after step t
//   cs    [T+1, B, H]  cs[0] = c0, cs[t+1] = c after step t
// A device needs only the two cell kernels (and gemm): the op then runs the time loop itself,
// one GEMM plus one cell kernel per step. A device may also register the whole-sequence
// kernels, which run the same loop inside the backend (the CPU one splits the batch across its
// threads, each running every step on its own rows without synchronisation); the op prefers them
// when present. Both forms must give the same results.
#pragma once
#include "core/kernel.h"
#include "freight/tensor.h"

namespace freight::kernels {

// One step forward. gates [B, 4H]: in, W_ih·x + W_hh·h (biases not yet added); out, the
// activations i = σ(·), f = σ(·), g = tanh(·), o = σ(·) after adding bias [4H] (= b_ih + b_hh).
// c_prev [B, H] in; c = f⊙c_prev + i⊙g and h = o⊙tanh(c) [B, H] out. All packed.
FREIGHT_KERNEL(lstm_cell_forward,
               void(Tensor& gates, const Tensor& bias, const Tensor& c_prev, Tensor& c, Tensor& h));

// One step backward. gates [B, 4H]: the activations saved by the forward step; c_prev, c [B, H];
// dh_out [B, H]: the gradient reaching this step's output; dh_next [B, H]: the gradient reaching
// h through the next step (both are summed). dc [B, H]: in, the gradient of c from the next step;
// out, the gradient of c_prev. dgates [B, 4H] out: gradients of the gate pre-activations. Packed.
FREIGHT_KERNEL(lstm_cell_backward,
               void(const Tensor& gates, const Tensor& c_prev, const Tensor& c,
                    const Tensor& dh_out, const Tensor& dh_next, Tensor& dc, Tensor& dgates));

// Optional: the whole forward layer. x [B, T, I] (batch-first, packed), w_ih [4H, I],
// w_hh [4H, H], bias [4H]. gates [T, B, 4H] out: the activations of every step; hs[0], cs[0]
// are read and hs[1..T], cs[1..T] written; every h_t also goes to output [B, T, H] (the op's
// batch-first result). h0_zero: hs[0] is all zeros (the first recurrent product may be skipped).
// How the input projections are computed is the backend's choice (one large GEMM up front, or
// fused into each step when the input is narrow).
FREIGHT_KERNEL(lstm_sequence_forward,
               void(const Tensor& x, const Tensor& w_ih, const Tensor& w_hh, const Tensor& bias,
                    Tensor& gates, Tensor& hs, Tensor& cs, Tensor& output, bool h0_zero));

// Optional: the whole backward pass of the layer, steps T-1 down to 0. x, w_ih, w_hh as given to
// the forward (packed); gates, hs, cs as the forward left them. dout [B, T, H]: gradient of the
// output (batch-first, as the op receives it). dh [B, H]: in, the gradient of h_n; out, that of
// h0 when need_dh0 (unspecified otherwise). dc [B, H]: in, the gradient of c_n; out, that of c0.
// Outputs, each written only when defined (the op allocates those it needs): dx [B, T, I],
// dw_ih [4H, I], dw_hh [4H, H], dbias [4H] (the gradient of b_ih and of b_hh alike).
FREIGHT_KERNEL(lstm_sequence_backward,
               void(const Tensor& x, const Tensor& w_ih, const Tensor& w_hh, const Tensor& gates,
                    const Tensor& hs, const Tensor& cs, const Tensor& dout, Tensor& dh, Tensor& dc,
                    bool need_dh0, Tensor& dx, Tensor& dw_ih, Tensor& dw_hh, Tensor& dbias));

}  // namespace freight::kernels
