// How close Freight's own kernels come to the roofline on a device: each layer type runs forward
// and backward on a fixed reference shape, and its efficiency is
//     roofline time of the reference (plan.h: roofline_seconds, both directions)
//     / (measured time − its kernel calls × the per-op cost)
// A GEMM-backed layer near the GEMM peak scores near 1; an LSTM whose per-step GEMMs are small,
// or a pooling kernel that moves its data twice, scores lower. The shapes below are typical
// mid-sized layers, chosen once and never a model's own, so freight plan's predictions stay
// predictions.
#include <fmt/format.h>

#include <algorithm>

#include "freight/autograd.h"
#include "freight/explain.h"
#include "freight/nn/layers.h"
#include "freight/nn/lstm.h"
#include "freight/ops.h"
#include "freight/optim/optimizer.h"
#include "freight/plan.h"
#include "freight/random.h"
#include "freight/runtime.h"
#include "freight/training.h"
#include "profile/peaks_device.h"

namespace freight::profile {

namespace {

struct Reference {
  nn::ModulePtr layer;
  Shape input;
  bool tokens = false;  // int64 indices in [0, vocab) instead of floats
  int64_t vocab = 0;
};

std::vector<Reference> references() {
  using namespace nn;
  std::vector<Reference> refs = {
      {std::make_shared<Linear>(512, 512), {64, 512}},
      {std::make_shared<Linear>(2048, 2048), {64, 2048}},  // "Linear:wide" (16 MiB of weight)
      {std::make_shared<Conv2d>(16, 32, 3, 2, 1), {32, 16, 32, 32}},
      {std::make_shared<Conv2d>(32, 32, 3, 1, 1), {32, 32, 16, 16}},  // "Conv2d:3x3"
      {std::make_shared<Conv2d>(3, 8, 5, 1, 2), {32, 3, 32, 32}},     // "Conv2d:narrow"
      {std::make_shared<MaxPool2d>(2), {32, 32, 32, 32}},
      {std::make_shared<AvgPool2d>(2), {32, 32, 32, 32}},
      {std::make_shared<BatchNorm2d>(32), {32, 32, 16, 16}},
      {std::make_shared<BatchNorm1d>(512), {64, 512}},
  };
  // Every activation of freight/unary_ops.h, on the same shape.
  for (const UnaryOpInfo& info : kUnaryOps)
    if (info.layer) refs.push_back({make_activation(info.op), {64, 4096}});
  refs.push_back({std::make_shared<Dropout>(0.5), {64, 4096}});
  refs.push_back({std::make_shared<LSTM>(64, 128), {64, 16, 64}});
  refs.push_back({std::make_shared<Embedding>(10000, 128), {64, 16}, true, 10000});
  return refs;
}

// Seconds of one call of `fn` on a quiet device (median_seconds: the CPU clock on the CPU).
template <class Fn>
double quiet_seconds(Device device, Fn&& fn) {
  return median_seconds(device.is_cpu(), 9, fn);
}

// Forward and backward time of one layer's pass with its per-op costs taken out.
double kernel_seconds(double measured, const LayerCost& c, const DevicePeaks& p) {
  double overhead = (c.fwd_ops + c.bwd_ops) * 0.5 * p.train_op_s;
  return std::max(measured - overhead, 0.2 * measured);
}

double efficiency(double roofline, double kernel) {
  // Bounded: a reference whose data stayed in a faster cache than its level's may beat the
  // roofline a little; anything beyond these bounds would be a measuring accident.
  return std::clamp(roofline / kernel, 0.02, 3.0);
}

}  // namespace

void measure_efficiency(Device device, DevicePeaks& p) {
  // The reference layers draw their initial weights (and dropout masks) from the global
  // generator: put its state back afterwards, so measuring never changes a seeded run.
  Generator& global = default_generator();
  struct Restore {
    Generator& g;
    uint64_t seed, offset;
    ~Restore() { g.set_state(seed, offset); }
  } restore{global, global.seed(), global.offset()};
  p.efficiency.clear();
  Generator gen(11);
  for (const Reference& ref : references()) {
    nn::Module& m = *ref.layer;
    m.to(device);
    m.train();
    Tensor x = ref.tokens ? Tensor::randint(ref.input, 0, ref.vocab, device, &gen)
                          : Tensor::normal(ref.input, 0, 1, DType::F32, device, &gen);
    if (!ref.tokens) x.set_requires_grad(true);  // a middle layer: dX is computed too
    Tensor g = Tensor::normal(m.output_shape(ref.input), 0, 1, DType::F32, device, &gen);
    double t = quiet_seconds(device, [&] {
      m.zero_grad();
      if (!ref.tokens) x.zero_grad();
      m(x).backward(g);
      synchronize(device);
    });
    LayerCost c = layer_costs(m, ref.input, !ref.tokens).front();
    double roof = roofline_seconds(c.fwd_flops, c.fwd_bytes, c.fwd_gemms, p) +
                  roofline_seconds(c.bwd_flops, c.bwd_bytes, c.bwd_gemms, p);
    p.efficiency[c.kernel] = efficiency(roof, kernel_seconds(t, c, p));
  }

  // The loss: cross-entropy over 256 rows of 100 classes.
  {
    Shape s{256, 100};
    Tensor logits = Tensor::normal(s, 0, 1, DType::F32, device, &gen).set_requires_grad(true);
    Tensor labels = Tensor::randint({256}, 0, 100, device, &gen);
    double t = quiet_seconds(device, [&] {
      logits.zero_grad();
      cross_entropy(logits, labels).backward();
      synchronize(device);
    });
    LayerCost c = loss_cost(s, 100);
    double roof = roofline_seconds(c.fwd_flops, c.fwd_bytes, 0, p) +
                  roofline_seconds(c.bwd_flops, c.bwd_bytes, 0, p);
    p.efficiency["loss"] = efficiency(roof, kernel_seconds(t, c, p));
  }

  // Optimizer steps over eight million parameters in four tensors: a working set (160 MB for SGD
  // with momentum, more for Adam) beyond the caches' levels, so the step streams from memory as a
  // large model's does. (A smaller reference that the last-level cache holds would run faster
  // than the memory roof and credit the optimizer with an efficiency above 1 that large models
  // never see.)
  for (const char* name : {"sgd", "adam"}) {
    std::vector<Tensor> params;
    for (int i = 0; i < 4; ++i) {
      Tensor w = Tensor::normal({2048, 1024}, 0, 1, DType::F32, device, &gen);
      w.set_requires_grad(true);
      w.set_grad(Tensor::normal({2048, 1024}, 0, 1e-3, DType::F32, device, &gen));
      params.push_back(w);
    }
    double momentum = std::string(name) == "sgd" ? 0.9 : 0.0;
    auto opt = make_optimizer(name, params, 1e-4, momentum, 0.0);
    double t = quiet_seconds(device, [&] {
      opt->step();
      synchronize(device);
    });
    LayerCost c = optimizer_cost(name, momentum, 4 * 2048 * 1024);
    double roof = roofline_seconds(c.fwd_flops, c.fwd_bytes, 0, p);
    double kernel = std::max(t - c.fwd_ops * p.op_s, 0.2 * t);
    p.efficiency[std::string("optimizer:") + name] = efficiency(roof, kernel);
  }
}

}  // namespace freight::profile
