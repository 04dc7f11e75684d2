// Static costs of a model's layers for an input shape: FLOPs and bytes forward (from the
// modules themselves: Module::flops, Module::bytes) and backward (from the layer type), and the
// number of kernel calls each direction makes (what the per-op dispatch and launch costs
// multiply). The rules are estimates in the spirit of a roofline model: every tensor is read or
// written once per kernel, caches are ignored.
#include <fmt/format.h>

#include <algorithm>

#include "freight/explain.h"
#include "freight/nn/container.h"
#include "freight/nn/layers.h"
#include "freight/nn/lstm.h"

namespace freight {

namespace {

constexpr double kF32 = 4.0;  // bytes per element

double numel(const Shape& s) {
  return double(shape_numel(s));
}

int64_t own_params(const nn::Module& m) {
  int64_t n = m.num_parameters();
  for (const auto& [name, child] : m.named_children()) n -= child->num_parameters();
  return n;
}

// Backward costs and kernel counts of a leaf layer, by type. `c` holds the forward FLOPs and
// bytes, shapes and own parameter count already. `grad_in`: whether the layer's input needs a
// gradient; autograd computes none for the data (the first Linear or Conv2d then skips its dX
// product, a third of its work), nor for anything between the data and the first weights.
void leaf_rules(const nn::Module& m, LayerCost& c, bool grad_in) {
  double in = numel(c.input), out = numel(c.output), p = double(c.params);
  const std::string& t = c.type;
  // Default: a layer with weights computes two products backward (dX and dW); one without
  // applies its derivative elementwise. Reads dY and the saved input, writes dX and dW.
  c.bwd_flops = c.params > 0 ? 2.0 * c.fwd_flops : c.fwd_flops;
  c.bwd_bytes = kF32 * (out + 2.0 * in + 2.0 * p);
  c.fwd_ops = 1;
  c.bwd_ops = 1;
  if (t == "Linear") {
    auto& l = dynamic_cast<const nn::Linear&>(m);
    double rows = out / double(l.out_features());
    bool bias = l.bias().defined();
    c.bwd_flops = 2.0 * c.fwd_flops + (bias ? rows * double(l.out_features()) : 0.0);
    c.fwd_ops = bias ? 2 : 1;  // the bias broadcast into the output, then the GEMM onto it
    c.fwd_gemms = 1;
    c.bwd_ops = bias ? 3 : 2;  // dX = dY·W, dW = dYᵀ·X, db = Σ dY
    c.bwd_gemms = 2;
    // A weight beyond a core's L2 (fcn5's 2048x4096, 32 MiB) is streamed through the caches by
    // each of the three GEMMs, which then reach a smaller fraction of the peak than a weight that
    // stays in L2: measured apart, on a reference of that size.
    if (kF32 * double(l.in_features()) * double(l.out_features()) > 4.0 * 1024 * 1024)
      c.kernel = "Linear:wide";
  } else if (t == "Conv2d") {
    // weight [out, in, kh, kw]: the GEMM is out x (in·kh·kw) by (in·kh·kw) x pixels; a narrow
    // one reaches a much smaller fraction of the GEMM peak. A 3x3 stride-1 one with 16 or more
    // channels in and out over 2048 or more output pixels is a class of its own: the CPU's
    // avx2 kernels run it as a Winograd F(2x2, 3x3) with 2.25 times fewer multiply-adds than
    // the FLOPs counted here (conv_winograd.h; its weight gradient there at any batch, the
    // class follows the forward's rule), the avx512 ones on oneDNN's Winograd from 32 channels.
    const auto& conv = dynamic_cast<const nn::Conv2d&>(m);
    const Shape& w = conv.weight().shape();
    const bool three = w.size() == 4 && w[2] == 3 && w[3] == 3 && conv.stride().h == 1 &&
                       conv.stride().w == 1 && conv.dilation().h == 1 && conv.dilation().w == 1;
    if (three && w[0] >= 16 && w[1] >= 16 && out / double(w[0]) >= 2048)
      c.kernel = "Conv2d:3x3";
    else if (w.size() == 4 && std::min(w[0], w[1] * w[2] * w[3]) <= 16)
      c.kernel = "Conv2d:narrow";
    c.fwd_gemms = 1;
    c.bwd_ops = 2;
    c.bwd_gemms = 2;
  } else if (const UnaryOpInfo* act = activation_by_layer(t)) {
    // The derivative's FLOPs per element from the op's descriptor (freight/unary_ops.h); reads
    // dY and the kept tensor, writes dX.
    c.bwd_flops = act->bwd_flops * in;
    c.bwd_bytes = kF32 * 3.0 * in;
  } else if (t == "MaxPool2d" || t == "AvgPool2d") {
    // dX is zero-filled, then each output's gradient lands on its window (max: one element).
    c.bwd_flops = t == "MaxPool2d" ? out : c.fwd_flops;
    c.bwd_bytes = kF32 * (2.0 * out + 2.0 * in);
  } else if (t == "BatchNorm1d" || t == "BatchNorm2d") {
    c.bwd_flops = 4.0 * in;  // two reductions over dY and dY·x̂, then dX
    c.bwd_bytes = kF32 * (3.0 * in + 2.0 * out + 2.0 * p);
  } else if (t == "Dropout") {
    c.fwd_bytes = kF32 * (in + out) + in;  // plus the byte mask kept for backward
    c.bwd_flops = in;
    c.bwd_bytes = kF32 * 2.0 * in + in;
  } else if (t == "Flatten" || t == "Reshape") {
    c.bwd_flops = 0;
    c.bwd_bytes = 0;  // views both ways
  } else if (t == "LastStep") {
    c.bwd_flops = 0;
    c.bwd_bytes = kF32 * (in + out);  // a zero gradient for the whole sequence, one step filled
  } else if (t == "Embedding") {
    auto& e = dynamic_cast<const nn::Embedding&>(m);
    // The table's gradient is zero-filled whole, then each looked-up row's gradient added.
    c.bwd_flops = out;
    c.bwd_bytes = kF32 * (double(shape_numel(e.weight().shape())) + 2.0 * out) + 8.0 * in;
  } else if (t == "LSTM") {
    auto& l = dynamic_cast<const nn::LSTM&>(m);
    double steps = double(c.input.at(1)), layers = double(l.num_layers());
    double h = double(l.hidden_size()), bt = double(c.input.at(0)) * steps;
    double cell = 10.0 * h * bt * layers;  // elementwise part of the forward FLOPs
    c.bwd_flops = 2.0 * (c.fwd_flops - cell) + 2.0 * cell;
    c.bwd_bytes = 2.0 * c.fwd_bytes;  // the gates and states are read back, their gradients written
    // Forward per layer: one GEMM over all steps for the input projection, then one small GEMM
    // and one cell per step (fused in one sequence kernel); the outputs h_n, c_n are stacked.
    c.fwd_ops = layers + 2;
    c.fwd_gemms = layers * (1 + steps);
    // Backward per layer: per step a GEMM for dh (and one for dx), then the two weight-gradient
    // GEMMs over the whole sequence.
    c.bwd_ops = layers + 2;
    c.bwd_gemms = layers * (2 * steps + 2);
  }
  if (grad_in) return;
  if (c.params == 0) {
    // Nothing before it needs a gradient: autograd records no backward for it at all.
    c.bwd_flops = c.bwd_bytes = c.bwd_ops = c.bwd_gemms = 0;
  } else if (t == "Linear" || t == "Conv2d") {
    // No dX = dY·W: one product backward (dW), plus the bias sum, and nothing written for X.
    c.bwd_flops -= c.fwd_flops;
    c.bwd_bytes -= kF32 * in;
    c.bwd_ops -= 1;
    c.bwd_gemms -= 1;
  } else if (t == "LSTM") {
    // The first layer's dX = dA·W_ih is skipped: one GEMM per step.
    auto& l = dynamic_cast<const nn::LSTM&>(m);
    double steps = double(c.input.at(1)), bt = double(c.input.at(0)) * steps;
    c.bwd_flops -= 2.0 * bt * 4.0 * double(l.hidden_size()) * double(c.input.back());
    c.bwd_bytes -= kF32 * in;
    c.bwd_gemms -= steps;
  } else if (t == "BatchNorm1d" || t == "BatchNorm2d") {
    c.bwd_flops = 2.0 * in;  // the two reductions for dgamma and dbeta; no dX
    c.bwd_bytes -= kF32 * in;
  }
}

// Appends the costs of `m` and its children; returns whether its output needs a gradient.
bool walk(const nn::Module& m, const std::string& name, const Shape& in, bool grad_in,
          std::vector<LayerCost>& out) {
  LayerCost c;
  c.name = name.empty() ? "(model)" : name;
  c.describe = m.describe();
  c.type = m.type_name();
  c.kernel = c.type;
  c.tag = &m;
  c.input_grad = grad_in;
  c.input = in;
  c.output = m.output_shape(in);
  c.params = own_params(m);
  c.fwd_flops = m.flops(in);
  c.fwd_bytes = m.bytes(in);
  auto* seq = dynamic_cast<const nn::Sequential*>(&m);
  auto* res = dynamic_cast<const nn::Residual*>(&m);
  if (m.named_children().empty() || (!seq && !res)) {
    // A leaf, or a container of unknown dataflow costed as a whole.
    leaf_rules(m, c, grad_in);
    out.push_back(c);
    // All of its parameters: a container costed as a whole has them in its children.
    return grad_in || m.num_parameters() > 0;
  }
  c.container = true;
  size_t self = out.size();
  out.push_back(c);
  std::string prefix = name.empty() ? "" : name + ".";
  double child_flops = 0, child_bytes = 0;
  auto child = [&](const nn::ModulePtr& cm, const std::string& cname, const Shape& s, bool g) {
    child_flops += cm->flops(s);
    child_bytes += cm->bytes(s);
    return walk(*cm, prefix + cname, s, g, out);
  };
  bool grad_out = grad_in;
  if (seq) {
    Shape s = in;
    const nn::Module* prev = nullptr;
    std::string prev_name;
    size_t prev_row = 0;
    // A ReLU fused into its neighbour (nn::fused_pair) has no pass and no kernel of its own.
    auto mark_fused = [&](LayerCost& relu, const std::string& into) {
      relu.describe += " (fused into " + prefix + into + ")";
      relu.fwd_flops = relu.bwd_flops = relu.fwd_bytes = relu.bwd_bytes = 0;
      relu.fwd_ops = relu.bwd_ops = 0;
      relu.fused = true;
    };
    const nn::NamedModules& children = seq->named_children();
    for (size_t i = 0; i < children.size(); ++i) {
      const auto& [cname, cm] = children[i];
      const size_t row = out.size();
      grad_out = child(cm, cname, s, grad_out);
      s = cm->output_shape(s);
      const nn::Module* after = i + 1 < children.size() ? children[i + 1].second.get() : nullptr;
      const nn::FusedPair fused = prev ? nn::fused_pair(*prev, *cm, after) : nn::FusedPair::None;
      if (fused != nn::FusedPair::None) {
        if (fused == nn::FusedPair::BatchNormRelu || fused == nn::FusedPair::MaxPoolRelu ||
            fused == nn::FusedPair::ResidualRelu || fused == nn::FusedPair::ConvRelu)
          mark_fused(out[row], prev_name);  // the ReLU runs inside the layer before it
        else
          mark_fused(out[prev_row], cname);  // the ReLU runs inside the pooling after it
        if (fused == nn::FusedPair::ResidualRelu || fused == nn::FusedPair::ConvRelu) {
          // relu's mask pass, now in the layer's backward, from the output it keeps
          out[prev_row].keeps_fused_output = true;
          const double n = numel(out[prev_row].output);
          out[prev_row].bwd_flops += n;
          out[prev_row].bwd_bytes += kF32 * 3.0 * n;
          out[prev_row].bwd_ops += 1;
        }
        if (fused == nn::FusedPair::ReluAvgPool) {
          out[prev_row].fused_keeps_input = true;
          out[row].bwd_bytes += kF32 * numel(out[row].input);  // relu's mask, read from x
        }
        prev = nullptr;
        continue;
      }
      prev = cm.get();
      prev_name = cname;
      prev_row = row;
    }
  } else {
    grad_out = child(res->body(), "body", in, grad_in);
    if (res->shortcut()) grad_out = child(res->shortcut(), "shortcut", in, grad_in) || grad_out;
  }
  // What remains is the container's own work: nothing for Sequential, the addition of Residual
  // (forward: one add; backward: the gradient passes to both branches, and the two gradients
  // arriving at the block's input are added where the branches meet).
  LayerCost& me = out[self];
  me.fwd_flops = std::max(0.0, me.fwd_flops - child_flops);
  me.fwd_bytes = std::max(0.0, me.fwd_bytes - child_bytes);
  if (res) {
    double n = numel(me.output);
    me.fwd_ops = 1;
    me.bwd_flops = n;
    me.bwd_bytes = kF32 * 3.0 * n;
    me.bwd_ops = 1;
  }
  return grad_out;
}

}  // namespace

std::vector<LayerCost> layer_costs(const nn::Module& model, const Shape& input,
                                   bool input_requires_grad) {
  std::vector<LayerCost> out;
  walk(model, "", input, input_requires_grad, out);
  return out;
}

double training_flops(const nn::Module& model, const Shape& input) {
  double total = 0;
  for (const LayerCost& c : layer_costs(model, input)) total += c.flops();
  return total;
}

LayerCost loss_cost(const Shape& output, int64_t classes) {
  LayerCost c;
  c.name = "loss";
  c.describe = "cross_entropy";
  c.type = "loss";
  c.kernel = "loss";
  c.input = output;
  c.output = {};
  double n = double(shape_numel(output));
  double rows = classes > 0 ? n / double(classes) : n;
  // Forward: a max, exp and sum per row, then the log and the picked logit; backward:
  // softmax − one-hot, scaled by 1/N.
  c.fwd_flops = 4.0 * n;
  c.fwd_bytes = kF32 * 2.0 * n + 8.0 * rows;
  c.bwd_flops = 3.0 * n;
  c.bwd_bytes = kF32 * 2.0 * n + 8.0 * rows;
  c.fwd_ops = 1;
  c.bwd_ops = 1;
  return c;
}

LayerCost optimizer_cost(const std::string& optimizer, double momentum, int64_t params) {
  LayerCost c;
  c.name = "optimizer";
  c.type = "optimizer";
  double p = double(params);
  if (optimizer == "adam" || optimizer == "adamw") {
    // Reads p, g, m, v; writes p, m, v; about a dozen operations per parameter.
    c.describe = optimizer == "adam" ? "Adam" : "AdamW";
    c.fwd_flops = 12.0 * p;
    c.fwd_bytes = kF32 * 7.0 * p;
  } else if (momentum > 0 || optimizer == "nesterov") {
    c.describe = optimizer == "nesterov" ? "SGD (Nesterov)" : "SGD with momentum";
    c.fwd_flops = 4.0 * p;
    c.fwd_bytes = kF32 * 5.0 * p;  // reads p, g, b; writes p, b
  } else {
    c.describe = "SGD";
    c.fwd_flops = 2.0 * p;
    c.fwd_bytes = kF32 * 3.0 * p;
  }
  c.fwd_ops = 1;  // one fused multi-tensor kernel per step
  return c;
}

}  // namespace freight
