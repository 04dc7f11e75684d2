// Containers: Sequential (children "0", "1", ... applied in order) and Residual
// (body(x) + shortcut(x), children "body" and "shortcut").
#pragma once
#include <initializer_list>
#include <string>

#include "freight/nn/module.h"

namespace freight::nn {

// Fusion of adjacent children: Sequential runs two neighbours as one op, with the same values
// and gradients as the pair, one pass over the activations fewer each way and no intermediate
// tensor:
//   * a BatchNorm followed by a ReLU (batch_norm_relu): the ReLU is fused into the BatchNorm;
//   * a ReLU followed by a MaxPool2d (relu_max_pool2d) or an AvgPool2d (relu_avg_pool2d), or a
//     MaxPool2d followed by a ReLU (max_pool2d_relu): the ReLU is fused into the pooling;
//   * a Residual followed by a ReLU: the block adds its branches with add_relu;
//   * a Conv2d followed by a ReLU (conv2d_relu), unless the ReLU is followed by a pooling that
//     takes it: the ReLU is applied as the convolution writes its output. The pooling's fusion
//     saves the ReLU's pass both ways, this one the forward's only (its backward still masks
//     the gradient in a pass before the convolution's).
// The ReLU child is then not called (explain shows it with no time of its own). On by default;
// off (set_fusion(false), or FREIGHT_FUSION=0 in the environment) is for comparing against the
// unfused ops.
void set_fusion(bool on);
bool fusion_enabled();
enum class FusedPair {
  None,
  BatchNormRelu,
  ReluMaxPool,
  ReluAvgPool,
  MaxPoolRelu,
  ResidualRelu,
  ConvRelu
};
// Which fusion Sequential applies to child `m` and the child after it, `next` (`after` is the
// child after `next`, or null): fusion is on and the two are exactly BatchNorm1d/BatchNorm2d and
// ReLU, ReLU and MaxPool2d or AvgPool2d, MaxPool2d and ReLU, Residual and ReLU, or Conv2d and a
// ReLU that `after` does not take (not subclasses, whose forward may differ).
FusedPair fused_pair(const Module& m, const Module& next, const Module* after);

class Sequential : public Module {
 public:
  Sequential() : Module("Sequential") {}
  Sequential(std::initializer_list<ModulePtr> modules);
  Sequential& push_back(ModulePtr module);  // registered as child "<size()>"
  size_t size() const { return named_children().size(); }
  const ModulePtr& operator[](size_t i) const;
  Tensor forward(const Tensor& x) override;
  Shape output_shape(const Shape& in) const override;  // through every child in turn
  double flops(const Shape& in) const override;        // the children's sum
  double bytes(const Shape& in) const override;        // the children's sum
};

// y = body(x) + shortcut(x); an undefined shortcut is the identity (and has no parameters).
// The two branches must produce the same shape.
class Residual : public Module {
 public:
  explicit Residual(ModulePtr body, ModulePtr shortcut = nullptr);
  Tensor forward(const Tensor& x) override;
  // relu(forward(x)), the addition and the ReLU in one pass each way (add_relu): what Sequential
  // runs for a Residual followed by a ReLU.
  Tensor forward_relu(const Tensor& x);
  Shape output_shape(const Shape& in) const override;
  double flops(const Shape& in) const override;  // both branches plus the addition
  double bytes(const Shape& in) const override;  // both branches plus the addition
  const ModulePtr& body() const { return body_; }
  const ModulePtr& shortcut() const { return shortcut_; }

 private:
  Tensor run(const Tensor& x, bool relu);
  ModulePtr body_, shortcut_;
};

}  // namespace freight::nn
