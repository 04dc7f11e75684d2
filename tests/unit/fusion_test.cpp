// Sequential's fusions, a BatchNorm followed by a ReLU (batch_norm_relu), a ReLU followed by a
// MaxPool2d (relu_max_pool2d) or an AvgPool2d (relu_avg_pool2d), a MaxPool2d followed by a ReLU
// (max_pool2d_relu), a Residual followed by a ReLU (add_relu) and a Conv2d followed by a ReLU
// that no pooling takes (conv2d_relu): a fused pair must give the
// unfused ops' outputs, gradients and running statistics bit for bit, in training and in
// evaluation, and must really be fused (its output comes from the fused op).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/autograd_node.h"
#include "freight/freight.h"

namespace freight {
namespace {

// Restores the process-wide switch whatever a test does.
struct FusionGuard {
  bool saved = nn::fusion_enabled();
  ~FusionGuard() { nn::set_fusion(saved); }
};

nn::ModulePtr conv_bn_relu_net() {
  return std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::Conv2d>(2, 4, 3, 1, 1), std::make_shared<nn::BatchNorm2d>(4),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::Flatten>(),
      std::make_shared<nn::Linear>(4 * 6 * 5, 8), std::make_shared<nn::BatchNorm1d>(8),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(8, 3)});
}

// Convolutions each followed by a ReLU and a max pooling: 2x2 (the fast path of the CPU
// kernel) and 3x3 stride 1 padding 1 (overlapping windows: a gradient sums over several).
nn::ModulePtr conv_relu_pool_net() {
  return std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::Conv2d>(2, 4, 3, 1, 1), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::MaxPool2d>(2), std::make_shared<nn::Conv2d>(4, 3, 3, 1, 1),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(3, 1, 1),
      std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(3 * 3 * 2, 3)});
}

// The same with average pooling: AlexNet's 3x3 stride 2 padding 1 (the CPU kernel's padded
// path), then 2x2 over an odd plane (the general path, whose windows leave a column out).
nn::ModulePtr conv_relu_avg_pool_net() {
  return std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::Conv2d>(2, 4, 3, 1, 1), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::AvgPool2d>(3, 2, 1), std::make_shared<nn::Conv2d>(4, 3, 3, 1, 1),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::AvgPool2d>(2),
      std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(3, 3)});
}

// AlexNet-CIFAR's order, pooling then ReLU: 3x3 stride 2 padding 1 (the AVX-512 path in
// float), then 3x3 stride 1 padding 1 (the general path) and 2x2 (the CPU kernel's 2x2 path).
nn::ModulePtr conv_pool_relu_net() {
  return std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::Conv2d>(2, 4, 3, 1, 1), std::make_shared<nn::MaxPool2d>(3, 2, 1),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::Conv2d>(4, 3, 3, 1, 1),
      std::make_shared<nn::MaxPool2d>(3, 1, 1), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Conv2d>(3, 3, 1), std::make_shared<nn::MaxPool2d>(2),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::Flatten>(),
      std::make_shared<nn::Linear>(3, 3)});
}

// ResNet's blocks: each Residual followed by a ReLU, one with the identity shortcut and one
// with a 1x1 strided convolution.
nn::ModulePtr residual_relu_net() {
  auto body = [](int64_t in, int64_t out, int64_t stride) {
    return std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
        std::make_shared<nn::Conv2d>(in, out, 3, stride, 1), std::make_shared<nn::BatchNorm2d>(out),
        std::make_shared<nn::ReLU>(), std::make_shared<nn::Conv2d>(out, out, 3, 1, 1)});
  };
  return std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::Conv2d>(2, 3, 3, 1, 1), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Residual>(body(3, 3, 1)), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Residual>(body(3, 4, 2), std::make_shared<nn::Conv2d>(3, 4, 1, 2)),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::Flatten>(),
      std::make_shared<nn::Linear>(4 * 3 * 3, 3)});
}

// MNIST-CNN's start: convolutions each followed by a ReLU that no pooling takes (one without a
// bias, one strided with padding), then the last ReLU fused into the max pooling after it.
nn::ModulePtr conv_relu_net() {
  return std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::Conv2d>(2, 4, 3), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Conv2d>(4, 3, 3, 1, 1, 1, false), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Conv2d>(3, 3, 3, 2, 1), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::MaxPool2d>(2), std::make_shared<nn::Flatten>(),
      std::make_shared<nn::Linear>(3, 3)});
}

struct Observed {
  std::vector<double> out;
  std::vector<std::vector<double>> grads, buffers;
};

// Two training steps' forward and backward (so the second uses updated running statistics),
// then an evaluation forward, from the same seed: everything observable.
Observed run(bool fuse, DType dtype, nn::ModulePtr (*make_net)() = conv_bn_relu_net) {
  nn::set_fusion(fuse);
  manual_seed(7);
  nn::ModulePtr net = make_net();
  net->to(dtype);
  Generator gen(3);
  Observed r;
  for (int step = 0; step < 2; ++step) {
    net->train();
    net->zero_grad();
    Tensor x = Tensor::normal({5, 2, 6, 5}, 0.3, 1.5, dtype, Device::cpu(), &gen);
    Tensor y = (*net)(x);
    Tensor w = Tensor::normal(y.shape(), 0, 1, dtype, Device::cpu(), &gen);
    sum(mul(y, w)).backward();
    std::vector<double> o = y.to_double_vector();
    r.out.insert(r.out.end(), o.begin(), o.end());
    for (const auto& [name, p] : net->named_parameters())
      r.grads.push_back(p.grad().to_double_vector());
  }
  net->eval();
  Tensor x = Tensor::normal({3, 2, 6, 5}, 0, 1, dtype, Device::cpu(), &gen);
  std::vector<double> o = (*net)(x).to_double_vector();
  r.out.insert(r.out.end(), o.begin(), o.end());
  for (const auto& [name, b] : net->named_buffers()) r.buffers.push_back(b.to_double_vector());
  return r;
}

// The network built by `make_net`, fused and not, in both float types: the same outputs,
// gradients and buffers (running statistics), bit for bit.
void expect_fusion_is_bit_identical(nn::ModulePtr (*make_net)()) {
  FusionGuard guard;
  for (DType dtype : {DType::F32, DType::F64}) {
    SCOPED_TRACE(dtype_name(dtype));
    Observed fused = run(true, dtype, make_net), plain = run(false, dtype, make_net);
    EXPECT_EQ(fused.out, plain.out);
    ASSERT_EQ(fused.grads.size(), plain.grads.size());
    for (size_t i = 0; i < fused.grads.size(); ++i) EXPECT_EQ(fused.grads[i], plain.grads[i]) << i;
    EXPECT_EQ(fused.buffers, plain.buffers);
  }
}

TEST(Fusion, BatchNormReluIsBitIdenticalToTheUnfusedPair) {
  expect_fusion_is_bit_identical(conv_bn_relu_net);
}

TEST(Fusion, ReluMaxPoolIsBitIdenticalToTheUnfusedPair) {
  expect_fusion_is_bit_identical(conv_relu_pool_net);
}

TEST(Fusion, ReluAvgPoolIsBitIdenticalToTheUnfusedPair) {
  expect_fusion_is_bit_identical(conv_relu_avg_pool_net);
}

TEST(Fusion, MaxPoolReluIsBitIdenticalToTheUnfusedPair) {
  expect_fusion_is_bit_identical(conv_pool_relu_net);
}

TEST(Fusion, ResidualReluIsBitIdenticalToTheUnfusedPair) {
  expect_fusion_is_bit_identical(residual_relu_net);
}

TEST(Fusion, ConvReluIsBitIdenticalToTheUnfusedPair) {
  expect_fusion_is_bit_identical(conv_relu_net);
}

// Element by element, NaN equal to NaN (a NaN must be where the other has one).
void expect_same(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i]))
      EXPECT_TRUE(std::isnan(got[i])) << "element " << i << ": " << got[i] << ", want NaN";
    else
      EXPECT_EQ(got[i], want[i]) << "element " << i;
  }
}

// relu(NaN) is NaN, as in PyTorch, and its gradient passes there: a NaN in one image's input
// turns that image's outputs under it into NaN, which the fused convolution keeps as the pair
// does (a diverged value stays visible), and the weight gradient is NaN both ways.
TEST(Fusion, ConvReluKeepsNanLikeTheUnfusedPair) {
  Generator gen(4);
  Tensor x = Tensor::normal({2, 1, 5, 5}, 0, 1, DType::F32, Device::cpu(), &gen);
  std::vector<double> v = x.to_double_vector();
  v[12] = std::numeric_limits<double>::quiet_NaN();  // the middle of the first image
  x = Tensor::from_vector(v, x.shape()).to(DType::F32);
  Tensor w = Tensor::normal({3, 1, 3, 3}, 0, 1, DType::F32, Device::cpu(), &gen);
  Tensor b = Tensor::normal({3}, 0, 1, DType::F32, Device::cpu(), &gen);
  std::vector<std::vector<double>> values, grads;
  for (bool fused : {true, false}) {
    Tensor wf = w.detach();
    wf.set_requires_grad(true);
    Tensor y = fused ? conv2d_relu(x, wf, b) : relu(conv2d(x, wf, b));
    sum(y).backward();
    values.push_back(y.to_double_vector());
    grads.push_back(wf.grad().to_double_vector());
  }
  expect_same(values[0], values[1]);
  expect_same(grads[0], grads[1]);
  size_t nans = 0;
  for (double e : values[0]) nans += std::isnan(e);
  EXPECT_EQ(nans, 3u * 9u);  // every output of the first image read the NaN
}

// relu itself, as PyTorch's: x < 0 ? 0 : x, so NaN stays NaN and −0 stays −0; the gradient
// passes where the output is positive or NaN, in float and double.
TEST(Fusion, ReluKeepsNanAndPassesItsGradientAsPyTorch) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (DType dt : {DType::F32, DType::F64}) {
    Tensor x = Tensor::from_vector(std::vector<double>{nan, -1.0, 0.0, -0.0, 2.0}, {5}).to(dt);
    x.set_requires_grad(true);
    Tensor y = relu(x);
    sum(y).backward();
    const std::vector<double> got = y.to_double_vector();
    expect_same(got, {nan, 0.0, 0.0, -0.0, 2.0});
    EXPECT_TRUE(std::signbit(got[3])) << "relu(-0) is -0, as in PyTorch";
    EXPECT_EQ(x.grad().to_double_vector(), (std::vector<double>{1, 0, 0, 0, 1}));
  }
}

// batch_norm_relu and add_relu with a NaN: the pair's values and gradients (NaN where the pair
// has NaN), so a diverged value is not hidden by the fusion.
TEST(Fusion, BatchNormReluAndAddReluKeepNanLikeTheUnfusedPairs) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<double> xv{0.5, -1.0, nan, 2.0, -3.0, 0.25, 1.5, -0.5};
  std::vector<std::vector<double>> values, grads;
  for (bool fused : {true, false}) {
    Tensor x = Tensor::from_vector(xv, {2, 2, 2, 1});
    x.set_requires_grad(true);
    Tensor w = Tensor::from_vector(std::vector<double>{1.5, -0.5}, {2});
    Tensor b = Tensor::from_vector(std::vector<double>{0.1, 0.2}, {2});
    Tensor rm = Tensor::zeros({2}, DType::F64), rv = Tensor::ones({2}, DType::F64);
    Tensor bn =
        fused ? batch_norm_relu(x, w, b, rm, rv, false) : relu(batch_norm(x, w, b, rm, rv, false));
    Tensor other =
        Tensor::from_vector(std::vector<double>{1, -1, 1, -1, 1, -1, 1, -1}, {2, 2, 2, 1});
    Tensor ar = fused ? add_relu(x, other) : relu(add(x, other));
    sum(add(bn, ar)).backward();
    std::vector<double> v = bn.to_double_vector(), a = ar.to_double_vector();
    v.insert(v.end(), a.begin(), a.end());
    values.push_back(v);
    grads.push_back(x.grad().to_double_vector());
  }
  expect_same(values[0], values[1]);
  expect_same(grads[0], grads[1]);
  EXPECT_TRUE(std::isnan(values[0][2]) && std::isnan(values[0][10]));
  EXPECT_TRUE(std::isnan(grads[0][2]) || grads[0][2] != 0) << "the NaN's gradient passes";
}

// A fused pooling and the pair relu-then-pool on 2x2 windows of `x` [1, 2, 2, 2] (NaN among
// them), each output's gradient the `weight` of its channel: the values and input gradients of
// both, [0] fused and [1] the pair.
using Pool2x2 = Tensor (*)(const Tensor&, Pair, Pair, Pair);
std::pair<std::vector<std::vector<double>>, std::vector<std::vector<double>>> fused_and_pair(
    Pool2x2 fused_pool, Pool2x2 pool, std::vector<double> x_values, std::vector<double> weight) {
  std::vector<std::vector<double>> values, grads;
  for (bool fused : {true, false}) {
    Tensor x = Tensor::from_vector(x_values, {1, 2, 2, 2});
    x.set_requires_grad(true);
    Tensor y =
        fused ? fused_pool(x, {2, 2}, {0, 0}, {0, 0}) : pool(relu(x), {2, 2}, {0, 0}, {0, 0});
    sum(mul(y, Tensor::from_vector(weight, {1, 2, 1, 1}))).backward();
    values.push_back(y.to_double_vector());
    grads.push_back(x.grad().to_double_vector());
  }
  return {values, grads};
}

// relu passes a NaN and its gradient: the fused average of a window holding one is NaN, and
// every element of the window but the negative one gets its share of the gradient, as with the
// pair (and PyTorch's avg_pool2d(relu(x))).
TEST(Fusion, ReluAvgPoolKeepsNanLikeTheUnfusedPair) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  auto [values, grads] = fused_and_pair(relu_avg_pool2d, avg_pool2d,
                                        {nan, 0.5, -1.0, 0.25, 1.0, -2.0, 3.0, 0.0}, {4.0, 8.0});
  expect_same(values[0], {nan, 1.0});
  expect_same(values[1], values[0]);
  EXPECT_EQ(grads[0], (std::vector<double>{1, 1, 0, 1, 2, 0, 2, 0}));
  EXPECT_EQ(grads[0], grads[1]);
}

// relu(NaN) is NaN, so a NaN wins the fused pooling's maximum as it wins max_pool2d's, and its
// gradient goes to it; a window of negative values gives 0 and no gradient.
TEST(Fusion, ReluMaxPoolLetsNanWinLikeTheUnfusedPair) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  auto [values, grads] = fused_and_pair(relu_max_pool2d, max_pool2d,
                                        {0.5, nan, -1.0, 0.25, -1.0, -2.0, -3.0, -4.0}, {3.0, 5.0});
  expect_same(values[0], {nan, 0.0});
  expect_same(values[1], values[0]);
  EXPECT_EQ(grads[0], (std::vector<double>{0, 3, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(grads[0], grads[1]);
}

// A NaN wins max_pool2d's maximum and relu keeps it, with its gradient: the fused
// max_pool2d_relu gives that, as the pair does.
TEST(Fusion, MaxPoolReluKeepsANanMaximumLikeTheUnfusedPair) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<std::vector<double>> values, grads;
  for (bool fused : {true, false}) {
    Tensor x = Tensor::from_vector(std::vector<double>{0.5, -1.0, nan, 0.25, -0.5, 2.0, -3.0, -4.0},
                                   {1, 2, 2, 2});
    x.set_requires_grad(true);
    Tensor y = fused ? max_pool2d_relu(x, {2, 2}) : relu(max_pool2d(x, {2, 2}));
    sum(mul(y, Tensor::from_vector(std::vector<double>{3.0, 5.0}, {1, 2, 1, 1}))).backward();
    values.push_back(y.to_double_vector());
    grads.push_back(x.grad().to_double_vector());
  }
  expect_same(values[0], {nan, 2.0});
  expect_same(values[1], values[0]);
  EXPECT_EQ(grads[0], (std::vector<double>{0, 0, 3, 0, 0, 5, 0, 0}));
  EXPECT_EQ(grads[0], grads[1]);
}

TEST(Fusion, TheSequentialRunsTheFusedOpOnlyWhenEnabled) {
  FusionGuard guard;
  manual_seed(1);
  nn::Sequential net{std::make_shared<nn::BatchNorm1d>(4), std::make_shared<nn::ReLU>()};
  Tensor x = Tensor::normal({6, 4}, 0, 1, DType::F32, Device::cpu());
  nn::set_fusion(true);
  Tensor y = net(x);
  ASSERT_TRUE(y.grad_fn());
  EXPECT_EQ(std::string(y.grad_fn()->name), "batch_norm_relu");
  size_t clamped = 0;
  for (double v : y.to_double_vector()) clamped += v == 0;
  EXPECT_GT(clamped, 0u);
  nn::set_fusion(false);
  EXPECT_EQ(std::string(net(x).grad_fn()->name), "relu");

  nn::Sequential pool_net{std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(2)};
  Tensor image = Tensor::normal({2, 3, 4, 4}, 0, 1, DType::F32, Device::cpu());
  image.set_requires_grad(true);
  nn::set_fusion(true);
  EXPECT_EQ(std::string(pool_net(image).grad_fn()->name), "relu_max_pool2d");
  nn::set_fusion(false);
  EXPECT_EQ(std::string(pool_net(image).grad_fn()->name), "max_pool2d");

  nn::Sequential pool_relu_net{std::make_shared<nn::MaxPool2d>(2), std::make_shared<nn::ReLU>()};
  nn::set_fusion(true);
  EXPECT_EQ(std::string(pool_relu_net(image).grad_fn()->name), "max_pool2d_relu");
  nn::set_fusion(false);
  EXPECT_EQ(std::string(pool_relu_net(image).grad_fn()->name), "relu");

  // A ReLU between a convolution and a max pooling goes to the pooling (saving its pass both
  // ways); one with no pooling after it to the convolution.
  nn::Sequential conv_net{std::make_shared<nn::Conv2d>(3, 2, 3), std::make_shared<nn::ReLU>()};
  nn::Sequential conv_pool_net{std::make_shared<nn::Conv2d>(3, 2, 3), std::make_shared<nn::ReLU>(),
                               std::make_shared<nn::MaxPool2d>(2)};
  nn::set_fusion(true);
  EXPECT_EQ(std::string(conv_net(image).grad_fn()->name), "conv2d_relu");
  EXPECT_EQ(std::string(conv_pool_net(image).grad_fn()->name), "relu_max_pool2d");
  nn::set_fusion(false);
  EXPECT_EQ(std::string(conv_net(image).grad_fn()->name), "relu");

  nn::Sequential block_net{std::make_shared<nn::Residual>(std::make_shared<nn::Conv2d>(3, 3, 1)),
                           std::make_shared<nn::ReLU>()};
  nn::set_fusion(true);
  EXPECT_EQ(std::string(block_net(image).grad_fn()->name), "add_relu");
  nn::set_fusion(false);
  EXPECT_EQ(std::string(block_net(image).grad_fn()->name), "relu");

  nn::Sequential avg_net{std::make_shared<nn::ReLU>(), std::make_shared<nn::AvgPool2d>(2)};
  nn::set_fusion(true);
  EXPECT_EQ(std::string(avg_net(image).grad_fn()->name), "relu_avg_pool2d");
  nn::set_fusion(false);
  EXPECT_EQ(std::string(avg_net(image).grad_fn()->name), "avg_pool2d");
}

// A ReLU subclass with its own forward is not the ReLU the fused kernels apply: it runs itself.
struct HalfReLU : nn::ReLU {
  Tensor forward(const Tensor& x) override { return scale(x, 0.5); }
};

TEST(Fusion, SubclassesAreNotFused) {
  FusionGuard guard;
  nn::set_fusion(true);
  manual_seed(2);
  nn::Sequential net{std::make_shared<nn::BatchNorm1d>(3), std::make_shared<HalfReLU>()};
  Tensor x = Tensor::normal({5, 3}, 0, 1, DType::F32, Device::cpu());
  std::vector<double> y = net(x).to_double_vector();
  std::vector<double> bn = (*net[0])(x).to_double_vector();
  ASSERT_EQ(y.size(), bn.size());
  for (size_t i = 0; i < y.size(); ++i) EXPECT_EQ(y[i], 0.5 * bn[i]) << i;
}

}  // namespace
}  // namespace freight
