// lstm_layer: one LSTM layer over a whole batch-first sequence, with PyTorch's equations and gate
// order (i, f, g, o):
//   [i f g o]ᵀ = [σ σ tanh σ](W_ih·x_t + b_ih + W_hh·h_{t-1} + b_hh)
//   c_t = f⊙c_{t-1} + i⊙g,   h_t = o⊙tanh(c_t).
//
// Forward: the input projections of all steps are one GEMM ([T·B, I]·W_ihᵀ); each step then adds
// h_{t-1}·W_hhᵀ (a [B, H]·[H, 4H] GEMM accumulated in place) and runs the fused cell kernel,
// which keeps the gate activations and c_t for backward (see ops/kernels/lstm.h for the
// time-major buffers).
//
// Backward through time, steps T-1 down to 0: the cell-backward kernel turns dh_t (from the
// output and from step t+1) and dc_t into the gradients of the gate pre-activations dA_t
// [B, 4H], and dh_{t-1} = dA_t·W_hh is one GEMM. Everything else is linear in the stacked
// dA [T·B, 4H] and is done once after the loop:
//   [dW_ih | dW_hh] = dAᵀ·[X | h_0 … h_{T-1}],  dX = dA·W_ih,  db_ih = db_hh = Σ_rows dA.
//
// That is the op's own loop, over the cell kernels and gemm. A backend that registers the
// whole-sequence kernels runs the forward and backward passes itself: the CPU's split the batch
// across threads for the whole sequence, fuse the step GEMMs with the cell, and accumulate the
// weight gradients as the steps go (see backend/cpu/lstm_cpu.cpp).
#include <fmt/format.h>

#include <array>

#include "core/autograd_node.h"
#include "core/tensor_impl.h"
#include "freight/error.h"
#include "freight/ops.h"
#include "ops/kernels/blas.h"
#include "ops/kernels/elementwise.h"
#include "ops/kernels/lstm.h"
#include "ops/op_utils.h"

namespace freight {

namespace {

// Slice t of a packed time-major buffer [T', B, W] as a packed [B, W] tensor (no autograd).
Tensor step(const Tensor& buf, int64_t t) {
  int64_t b = buf.size(1), w = buf.size(2);
  return make_view(buf, {b, w}, {w, 1}, buf.offset() + t * b * w);
}

// Steps [t0, t1) of a packed time-major buffer as a packed [(t1 - t0)·B, W] matrix.
Tensor steps(const Tensor& buf, int64_t t0, int64_t t1) {
  int64_t b = buf.size(1), w = buf.size(2);
  return make_view(buf, {(t1 - t0) * b, w}, {w, 1}, buf.offset() + t0 * b * w);
}

// A packed copy of `x` with dimensions 0 and 1 swapped ([B, T, ·] <-> [T, B, ·]); no autograd.
Tensor swap01(const Tensor& x) {
  Tensor v = x.detach().transpose(0, 1);
  Tensor out = Tensor::empty(v.shape(), x.dtype(), x.device());
  if (out.numel() > 0) kernels::copy(x.device().type, v, out);
  return out;
}

Tensor copy_of(const Tensor& x) {
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (out.numel() > 0) kernels::copy(x.device().type, x.detach(), out);
  return out;
}

// c = op(a)·op(b) (+ c when accumulate); operands packed 2-D.
void gemm(const Tensor& a, bool ta, const Tensor& b, bool tb, Tensor c, bool accumulate) {
  if (c.numel() > 0) kernels::gemm(c.device().type, a, ta, b, tb, c, 1.0, accumulate ? 1.0 : 0.0);
}

struct Dims {
  int64_t batch, steps, input, hidden;
};

Dims check_lstm(const Tensor& x, const Tensor& h0, const Tensor& c0, const Tensor& w_ih,
                const Tensor& w_hh, const Tensor& b_ih, const Tensor& b_hh) {
  const char* op = "lstm_layer";
  check_floating(x, op);
  FREIGHT_CHECK(x.dim() == 3, fmt::format("lstm_layer: input x has shape {}; expected a "
                                          "batch-first sequence [batch, steps, features]",
                                          shape_str(x.shape())));
  Dims d{x.size(0), x.size(1), x.size(2), 0};
  FREIGHT_CHECK(d.batch > 0 && d.steps > 0 && d.input > 0,
                fmt::format("lstm_layer: input x has shape {}; batch, steps and features must "
                            "all be at least 1",
                            shape_str(x.shape())));
  check_same_device_dtype(x, w_ih, op);
  check_same_device_dtype(x, w_hh, op);
  FREIGHT_CHECK(
      w_ih.dim() == 2 && w_ih.size(0) % 4 == 0 && w_ih.size(0) > 0 && w_ih.size(1) == d.input,
      fmt::format("lstm_layer: w_ih has shape {}; expected [4*hidden, {}] for input x {} "
                  "(gates i, f, g, o stacked)",
                  shape_str(w_ih.shape()), d.input, shape_str(x.shape())));
  d.hidden = w_ih.size(0) / 4;
  const int64_t h = d.hidden;
  FREIGHT_CHECK(w_hh.shape() == Shape({4 * h, h}),
                fmt::format("lstm_layer: w_hh has shape {}; expected [{}, {}] (w_ih {} means "
                            "hidden size {})",
                            shape_str(w_hh.shape()), 4 * h, h, shape_str(w_ih.shape()), h));
  for (const auto& [b, name] : {std::pair{&b_ih, "b_ih"}, std::pair{&b_hh, "b_hh"}}) {
    if (!b->defined()) continue;
    check_same_device_dtype(x, *b, op);
    FREIGHT_CHECK(b->shape() == Shape({4 * h}),
                  fmt::format("lstm_layer: {} has shape {}; expected [{}] (hidden size {})", name,
                              shape_str(b->shape()), 4 * h, h));
  }
  for (const auto& [s, name] : {std::pair{&h0, "h0"}, std::pair{&c0, "c0"}}) {
    if (!s->defined()) continue;
    check_same_device_dtype(x, *s, op);
    FREIGHT_CHECK(s->shape() == Shape({d.batch, h}),
                  fmt::format("lstm_layer: {} has shape {}; expected [batch, hidden] = [{}, {}] "
                              "for input x {} and w_hh {}",
                              name, shape_str(s->shape()), d.batch, h, shape_str(x.shape()),
                              shape_str(w_hh.shape())));
  }
  return d;
}

// Initial state slot 0 of hs/cs: a copy of the given state, or zeros.
void set_initial(Tensor& buf, const Tensor& s) {
  Tensor dst = step(buf, 0);
  if (s.defined())
    kernels::copy(buf.device().type, s.detach(), dst);
  else
    kernels::fill(buf.device().type, dst, 0.0);
}

// What the backward rule keeps from the forward call.
struct Saved {
  int64_t B, T, I, H;
  Device device;
  std::array<bool, 7> need;  // which of x, h0, c0, w_ih, w_hh, b_ih, b_hh need a gradient
  Tensor x, wi, wh, gates, hs, cs;
};

// Backward through time with the cell kernel and one GEMM per step (for devices without the
// whole-sequence kernel), then the gradients that are linear in the stacked dA [T·B, 4H].
// dh and dc: in, the gradients of h_n and c_n; out, those of h0 and c0. Fills out[0], out[3],
// out[4] and db as needed.
void step_loop_backward(const Saved& sv, const Tensor& dout_bf, Tensor& dh, Tensor& dc,
                        std::vector<Tensor>& out, Tensor& db) {
  const int64_t B = sv.B, T = sv.T, I = sv.I, H = sv.H;
  const DeviceType dev = sv.device.type;
  const DType dt = sv.x.dtype();
  Tensor dgates = Tensor::empty({T, B, 4 * H}, dt, sv.device);
  Tensor dout = swap01(dout_bf);  // time-major, one packed slice per step
  for (int64_t t = T - 1; t >= 0; --t) {
    Tensor da = step(dgates, t);
    // dh is read here before the GEMM below overwrites it with dh_{t-1}.
    kernels::lstm_cell_backward(dev, step(sv.gates, t), step(sv.cs, t), step(sv.cs, t + 1),
                                step(dout, t), dh, dc, da);
    if (t > 0 || sv.need[1]) gemm(da, false, sv.wh, false, dh, false);
  }
  Tensor da_all = steps(dgates, 0, T);
  if (sv.need[0]) {  // dX = dA·W_ih, back to batch-first
    Tensor dx_tm = Tensor::empty({T, B, I}, dt, sv.device);
    gemm(da_all, false, sv.wi, false, steps(dx_tm, 0, T), false);
    out[0] = swap01(dx_tm);
  }
  if (sv.need[3] || sv.need[4]) {
    // Both weight gradients from one GEMM over the rows [x_t | h_{t-1}] (time-major, as dA):
    // [dW_ih | dW_hh]ᵀ = [X | H_prev]ᵀ·dA, [I + H, 4H]. One long GEMM packs dA once and runs
    // far closer to the BLAS's peak than two thin ones (I is often small).
    Tensor xh = Tensor::empty({T, B, I + H}, dt, sv.device);
    Tensor xh_x = make_view(xh, {T, B, I}, {B * (I + H), I + H, 1}, xh.offset());
    Tensor xh_h = make_view(xh, {T, B, H}, {B * (I + H), I + H, 1}, xh.offset() + I);
    kernels::copy(dev, sv.x.transpose(0, 1), xh_x);
    kernels::copy(dev, steps(sv.hs, 0, T).view({T, B, H}), xh_h);
    Tensor dwt = Tensor::empty({I + H, 4 * H}, dt, sv.device);
    gemm(steps(xh, 0, T), true, da_all, false, dwt, false);
    if (sv.need[3]) out[3] = copy_of(make_view(dwt, {4 * H, I}, {1, 4 * H}, dwt.offset()));
    if (sv.need[4])
      out[4] = copy_of(make_view(dwt, {4 * H, H}, {1, 4 * H}, dwt.offset() + I * 4 * H));
  }
  if (sv.need[5] || sv.need[6]) db = sum(da_all, {0});
}

}  // namespace

LstmResult lstm_layer(const Tensor& x, const Tensor& h0, const Tensor& c0, const Tensor& w_ih,
                      const Tensor& w_hh, const Tensor& b_ih, const Tensor& b_hh) {
  const Dims d = check_lstm(x, h0, c0, w_ih, w_hh, b_ih, b_hh);
  const int64_t B = d.batch, T = d.steps, I = d.input, H = d.hidden;
  const DeviceType dev = x.device().type;
  const DType dt = x.dtype();
  const Device device = x.device();

  Tensor wi = packed(w_ih.detach()), wh = packed(w_hh.detach());
  // bias = b_ih + b_hh: the two always appear summed.
  Tensor bias = Tensor::empty({4 * H}, dt, device);
  if (b_ih.defined() && b_hh.defined())
    kernels::binary(dev, BinaryOp::Add, b_ih.detach(), b_hh.detach(), bias);
  else if (b_ih.defined() || b_hh.defined())
    kernels::copy(dev, (b_ih.defined() ? b_ih : b_hh).detach(), bias);
  else
    kernels::fill(dev, bias, 0.0);

  Tensor gates = Tensor::empty({T, B, 4 * H}, dt, device);
  Tensor hs = Tensor::empty({T + 1, B, H}, dt, device);
  Tensor cs = Tensor::empty({T + 1, B, H}, dt, device);
  set_initial(hs, h0);
  set_initial(cs, c0);
  LstmResult r;
  if (kernels::lstm_sequence_forward.has(dev)) {
    r.output = Tensor::empty({B, T, H}, dt, device);
    kernels::lstm_sequence_forward(dev, packed(x.detach()), wi, wh, bias, gates, hs, cs, r.output,
                                   !h0.defined());
  } else {
    // Input projections of every step at once, time-major: gates[t, b] = W_ih·x[b, t].
    gemm(swap01(x).view({T * B, I}), false, wi, true, steps(gates, 0, T), false);
    for (int64_t t = 0; t < T; ++t) {
      Tensor g = step(gates, t), c = step(cs, t + 1), h = step(hs, t + 1);
      if (t > 0 || h0.defined()) gemm(step(hs, t), false, wh, true, g, true);
      kernels::lstm_cell_forward(dev, g, bias, step(cs, t), c, h);
    }
    r.output = swap01(steps(hs, 1, T + 1).view({T, B, H}));
  }
  r.h_n = copy_of(step(hs, T));
  r.c_n = copy_of(step(cs, T));

  std::vector<Tensor> inputs{x, h0, c0, w_ih, w_hh, b_ih, b_hh};
  if (!needs_grad(inputs)) return r;

  // Saved for backward: the activations, all states, the operands (detached, no cycles).
  Saved sv{B, T, I, H, x.device(), {}, x.detach(), wi, wh, gates, hs, cs};
  for (size_t i = 0; i < inputs.size(); ++i)
    sv.need[i] = inputs[i].defined() && inputs[i].requires_grad();
  record("lstm_layer", inputs, {r.output, r.h_n, r.c_n}, [sv](const std::vector<Tensor>& g) {
    const DeviceType dev = sv.device.type;
    const DType dt = sv.x.dtype();
    // dh and dc carry the gradients of h_t and c_t down the steps; they end as dh0 and dc0.
    Tensor dh = copy_of(g[1]), dc = copy_of(g[2]);
    std::vector<Tensor> out(7);
    Tensor db;  // Σ over steps and batch of dA: the gradient of both biases
    auto alloc = [&](bool needed, Shape s) {
      return needed ? Tensor::empty(s, dt, sv.device) : Tensor();
    };
    if (kernels::lstm_sequence_backward.has(dev)) {
      out[0] = alloc(sv.need[0], {sv.B, sv.T, sv.I});
      out[3] = alloc(sv.need[3], {4 * sv.H, sv.I});
      out[4] = alloc(sv.need[4], {4 * sv.H, sv.H});
      db = alloc(sv.need[5] || sv.need[6], {4 * sv.H});
      kernels::lstm_sequence_backward(dev, packed(sv.x), sv.wi, sv.wh, sv.gates, sv.hs, sv.cs,
                                      packed(g[0]), dh, dc, sv.need[1], out[0], out[3], out[4], db);
    } else {
      step_loop_backward(sv, packed(g[0]), dh, dc, out, db);
    }
    if (sv.need[1]) out[1] = dh;
    if (sv.need[2]) out[2] = dc;
    if (sv.need[5]) out[5] = db;
    if (sv.need[6]) out[6] = sv.need[5] ? copy_of(db) : db;
    return out;
  });
  return r;
}

}  // namespace freight
