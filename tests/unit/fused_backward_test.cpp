// Fused backward (Optimizer::set_fused_backward): SGD's update of a large linear weight runs
// inside the layer's backward, band by band, without a gradient tensor. Each test trains the
// same two-layer network twice from the same seed, once with the usual zero_grad / backward /
// step and once fused, and compares the weights, the momentum buffers and the step counts; and
// checks that the fusion really ran (the fused weight has no grad() after backward) or, where
// it must not, that it did not.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>

#include "freight/freight.h"
#include "freight/optim/optim.h"

namespace freight {
namespace {

// 1024 x 1024 weights: the CPU kernel fuses weights of at least 2^20 elements, batches of at
// most 64 rows.
constexpr int64_t kWidth = 1024;

struct Net {
  std::shared_ptr<nn::Linear> big, head;
  explicit Net(uint64_t seed) {
    manual_seed(seed);
    big = std::make_shared<nn::Linear>(kWidth, kWidth);
    head = std::make_shared<nn::Linear>(kWidth, 10);
  }
  std::vector<Tensor> params() const {
    return {big->weight(), big->bias(), head->weight(), head->bias()};
  }
  Tensor loss(const Tensor& x, const Tensor& y, bool twice = false) {
    Tensor h = sigmoid((*big)(x));
    if (twice) h = sigmoid((*big)(h));  // the big weight used twice
    return mse_loss((*head)(h), y);
  }
};

struct Batch {
  Tensor x, y;
};
Batch batch(int64_t rows, uint64_t seed) {
  Generator g(seed);
  return {Tensor::normal({rows, kWidth}, 0, 1, DType::F32, Device::cpu(), &g),
          Tensor::normal({rows, 10}, 0, 1, DType::F32, Device::cpu(), &g)};
}

double max_rel_diff(const Tensor& a, const Tensor& b) {
  std::vector<double> u = a.to_double_vector(), v = b.to_double_vector();
  EXPECT_EQ(u.size(), v.size());
  double worst = 0, scale = 0;
  for (size_t i = 0; i < u.size(); ++i) {
    worst = std::max(worst, std::abs(u[i] - v[i]));
    scale = std::max(scale, std::abs(v[i]));
  }
  return worst / std::max(scale, 1e-30);
}

struct SgdSettings {
  std::string name;
  double momentum, dampening, weight_decay;
  bool nesterov;
};

class FusedSgd : public ::testing::TestWithParam<SgdSettings> {};

// Steps of the usual and the fused optimizer side by side; the fused one's big weight must have
// no gradient after each backward (its update ran there), the head's must.
TEST_P(FusedSgd, StepsMatchTheUsualOnes) {
  const SgdSettings s = GetParam();
  Net usual(7), fused(7);
  optim::SGD a(usual.params(), 0.05, s.momentum, s.dampening, s.weight_decay, s.nesterov);
  optim::SGD b(fused.params(), 0.05, s.momentum, s.dampening, s.weight_decay, s.nesterov);
  b.set_fused_backward(true);
  for (int step = 0; step < 4; ++step) {
    Batch d = batch(48, 100 + step);
    a.zero_grad();
    usual.loss(d.x, d.y).backward();
    a.step();
    b.zero_grad();
    fused.loss(d.x, d.y).backward();
    EXPECT_FALSE(fused.big->weight().grad().defined()) << "step " << step << ": not fused";
    EXPECT_TRUE(fused.head->weight().grad().defined()) << "step " << step;
    EXPECT_EQ(b.updated_in_backward(), kWidth * kWidth);
    b.step();
    for (size_t k = 0; k < usual.params().size(); ++k)
      EXPECT_LT(max_rel_diff(fused.params()[k], usual.params()[k]), 2e-5)
          << "parameter " << k << " after step " << step;
  }
  EXPECT_EQ(b.step_counts(), a.step_counts());
  optim::NamedTensors sa = a.state(), sb = b.state();
  ASSERT_EQ(sa.size(), sb.size());
  for (size_t k = 0; k < sa.size(); ++k) {
    EXPECT_EQ(sa[k].first, sb[k].first);
    EXPECT_LT(max_rel_diff(sb[k].second, sa[k].second), 2e-5) << sa[k].first;
  }
}

INSTANTIATE_TEST_SUITE_P(Settings, FusedSgd,
                         ::testing::Values(SgdSettings{"plain", 0, 0, 0, false},
                                           SgdSettings{"momentum", 0.9, 0, 0, false},
                                           SgdSettings{"dampening_and_decay", 0.9, 0.3, 1e-2,
                                                       false},
                                           SgdSettings{"nesterov", 0.9, 0, 1e-3, true}),
                         [](const auto& info) { return info.param.name; });

// Two fused runs from the same seed agree bit for bit.
TEST(FusedBackward, RepeatsBitForBit) {
  Net n1(3), n2(3);
  optim::SGD a(n1.params(), 0.05, 0.9), b(n2.params(), 0.05, 0.9);
  a.set_fused_backward(true);
  b.set_fused_backward(true);
  for (int step = 0; step < 3; ++step) {
    Batch d = batch(64, 200 + step);
    for (auto [net, opt] : {std::pair{&n1, &a}, std::pair{&n2, &b}}) {
      opt->zero_grad();
      net->loss(d.x, d.y).backward();
      opt->step();
    }
  }
  EXPECT_EQ(n1.big->weight().to_double_vector(), n2.big->weight().to_double_vector());
}

// Where the fusion must not run, the weight gets its gradient as usual and the step is SGD's.
struct Declined {
  const char* what;
  int64_t rows;
  bool twice;
  bool retain;
};

class FusedBackwardDeclines : public ::testing::TestWithParam<Declined> {};

TEST_P(FusedBackwardDeclines, AndTheStepIsTheUsualOne) {
  const Declined c = GetParam();
  Net usual(11), fused(11);
  optim::SGD a(usual.params(), 0.05, 0.9), b(fused.params(), 0.05, 0.9);
  b.set_fused_backward(true);
  Batch d = batch(c.rows, 5);
  a.zero_grad();
  usual.loss(d.x, d.y, c.twice).backward({}, c.retain);
  a.step();
  b.zero_grad();
  fused.loss(d.x, d.y, c.twice).backward({}, c.retain);
  EXPECT_TRUE(fused.big->weight().grad().defined()) << c.what << ": fused anyway";
  EXPECT_EQ(b.updated_in_backward(), 0);
  b.step();
  EXPECT_LT(max_rel_diff(fused.big->weight(), usual.big->weight()), 1e-6) << c.what;
}

INSTANTIATE_TEST_SUITE_P(Cases, FusedBackwardDeclines,
                         ::testing::Values(Declined{"batch_over_64_rows", 65, false, false},
                                           Declined{"weight_used_twice", 16, true, false},
                                           Declined{"graph_retained", 16, false, true}),
                         [](const auto& info) { return std::string(info.param.what); });

// A second backward before step() would have seen the updated weight: step() refuses the
// gradient it left, naming the parameter and the way out.
TEST(FusedBackward, TwoBackwardsBeforeAStepAreAnError) {
  Net net(13);
  optim::SGD opt(net.params(), 0.05, 0.9);
  opt.set_fused_backward(true);
  Batch d = batch(16, 6);
  opt.zero_grad();
  net.loss(d.x, d.y).backward();
  net.loss(d.x, d.y).backward();
  try {
    opt.step();
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("parameter 0 (shape [1024, 1024])"), std::string::npos) << m;
    EXPECT_NE(m.find("set_fused_backward(false)"), std::string::npos) << m;
  }
}

// The sinks go with the optimizer, and with a loaded state (which replaces the buffers they
// hold): a backward afterwards fills grad() as usual.
TEST(FusedBackward, SinksLeaveWithTheOptimizerAndOnLoadState) {
  Net net(17);
  Batch d = batch(16, 7);
  {
    optim::SGD opt(net.params(), 0.05, 0.9);
    opt.set_fused_backward(true);
    opt.zero_grad();
  }
  net.loss(d.x, d.y).backward();
  EXPECT_TRUE(net.big->weight().grad().defined());

  optim::SGD opt(net.params(), 0.05, 0.9);
  opt.set_fused_backward(true);
  opt.zero_grad();
  opt.load_state(opt.state());
  net.loss(d.x, d.y).backward();
  EXPECT_TRUE(net.big->weight().grad().defined());
  opt.step();
}

// Adam keeps the usual path (only SGD lends its parameters sinks so far).
TEST(FusedBackward, AdamIsNotFused) {
  Net net(19);
  optim::Adam opt(net.params(), 1e-3);
  opt.set_fused_backward(true);
  Batch d = batch(16, 8);
  opt.zero_grad();
  net.loss(d.x, d.y).backward();
  EXPECT_TRUE(net.big->weight().grad().defined());
  opt.step();
}

}  // namespace
}  // namespace freight
