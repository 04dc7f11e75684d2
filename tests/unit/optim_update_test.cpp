// Optimizer updates against steps worked out by hand for tiny parameters. Each test sets the
// gradient directly (as backward would), calls step(), and compares with the maths written out
// in the comments.
#include <gtest/gtest.h>

#include <cmath>

#include "common/test_util.h"
#include "freight/freight.h"
#include "freight/optim/optim.h"

namespace freight {
namespace {

using optim::Adam;
using optim::AdamW;
using optim::SGD;

Tensor param(std::vector<double> v, DType dtype = DType::F64) {
  Shape s{int64_t(v.size())};
  return Tensor::from_vector(v, s).to(dtype).set_requires_grad();
}

void set_grad(const Tensor& p, std::vector<double> g) {
  p.set_grad(Tensor::from_vector(g, p.shape()).to(p.dtype()));
}

std::vector<double> values(const Tensor& t) {
  return t.to_double_vector();
}

void expect_near(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "element " << i;
}

class OptimDtypes : public ::testing::TestWithParam<DType> {
 protected:
  double tol() const { return GetParam() == DType::F64 ? 1e-12 : 2e-6; }
};

TEST_P(OptimDtypes, PlainSgd) {
  // p = [1, -2], lr = 0.1: p ← p − 0.1·g
  Tensor p = param({1, -2}, GetParam());
  SGD opt({p}, 0.1);
  set_grad(p, {0.5, -1});
  opt.step();  // [1 − 0.05, −2 + 0.1]
  expect_near(values(p), {0.95, -1.9}, tol());
  set_grad(p, {2, 3});
  opt.step();  // [0.95 − 0.2, −1.9 − 0.3]
  expect_near(values(p), {0.75, -2.2}, tol());
}

TEST_P(OptimDtypes, SgdMomentumDampeningAndWeightDecay) {
  // lr 0.1, μ 0.9, dampening 0.5, wd 0.1; p0 = 1, gradients 1 then 2 then −1.
  Tensor p = param({1}, GetParam());
  SGD opt({p}, 0.1, 0.9, 0.5, 0.1);
  set_grad(p, {1});
  opt.step();
  // d1 = 1 + 0.1·1 = 1.1; first step b1 = d1 = 1.1 (no dampening); p1 = 1 − 0.11 = 0.89
  expect_near(values(p), {0.89}, tol());
  set_grad(p, {2});
  opt.step();
  // d2 = 2 + 0.089 = 2.089; b2 = 0.9·1.1 + 0.5·2.089 = 0.99 + 1.0445 = 2.0345;
  // p2 = 0.89 − 0.20345 = 0.68655
  expect_near(values(p), {0.68655}, tol());
  set_grad(p, {-1});
  opt.step();
  // d3 = −1 + 0.068655 = −0.931345; b3 = 0.9·2.0345 + 0.5·(−0.931345) = 1.83105 − 0.4656725
  //    = 1.3653775; p3 = 0.68655 − 0.13653775 = 0.55001225
  expect_near(values(p), {0.55001225}, tol());
  auto st = opt.state();
  ASSERT_EQ(st.size(), 3u);  // lr, step, momentum_buffer
  EXPECT_EQ(st[1].first, "state.0.step");
  EXPECT_EQ(st[1].second.item(), 3);
  EXPECT_EQ(st[2].first, "state.0.momentum_buffer");
  EXPECT_NEAR(st[2].second.item(), 1.3653775, tol());
}

TEST_P(OptimDtypes, SgdNesterov) {
  // lr 0.1, μ 0.9, Nesterov; p0 = [1, 2]; gradients [1, −1] then [0.5, 0.5].
  Tensor p = param({1, 2}, GetParam());
  SGD opt({p}, 0.1, 0.9, 0, 0, true);
  set_grad(p, {1, -1});
  opt.step();
  // b1 = g1 = [1, −1]; d = g1 + 0.9·b1 = [1.9, −1.9]; p1 = [1 − 0.19, 2 + 0.19] = [0.81, 2.19]
  expect_near(values(p), {0.81, 2.19}, tol());
  set_grad(p, {0.5, 0.5});
  opt.step();
  // b2 = 0.9·[1, −1] + [0.5, 0.5] = [1.4, −0.4]; d = [0.5 + 1.26, 0.5 − 0.36] = [1.76, 0.14]
  // p2 = [0.81 − 0.176, 2.19 − 0.014] = [0.634, 2.176]
  expect_near(values(p), {0.634, 2.176}, tol());
}

TEST_P(OptimDtypes, AdamBiasCorrection) {
  // lr 0.1, β = (0.9, 0.999), ε = 1e-8; p0 = [1, −1]; g1 = [0.5, −2], g2 = [−1, 1].
  Tensor p = param({1, -1}, GetParam());
  Adam opt({p}, 0.1);
  set_grad(p, {0.5, -2});
  opt.step();
  // m1 = 0.1·g1, v1 = 0.001·g1²; bias-corrected m̂ = g1, v̂ = g1², so the step is lr·g/|g| ≈
  // lr·sign(g) (up to ε): p1 = p0 − 0.1·sign(g1) = [0.9, −0.9].
  auto adam_ref = [](double p, std::vector<double> gs, double lr, double wd, bool decoupled) {
    double m = 0, v = 0;
    for (size_t t = 1; t <= gs.size(); ++t) {
      double g = gs[t - 1];
      if (decoupled)
        p *= 1 - lr * wd;
      else
        g += wd * p;
      m = 0.9 * m + 0.1 * g;
      v = 0.999 * v + 0.001 * g * g;
      double mhat = m / (1 - std::pow(0.9, double(t)));
      double vhat = v / (1 - std::pow(0.999, double(t)));
      p -= lr * mhat / (std::sqrt(vhat) + 1e-8);
    }
    return p;
  };
  expect_near(values(p), {1 - 0.1 * 0.5 / (0.5 + 1e-8), -1 + 0.1 * 2 / (2 + 1e-8)}, tol());
  set_grad(p, {-1, 1});
  opt.step();
  // Step 2 for element 0 by hand: m2 = 0.9·0.05 + 0.1·(−1) = −0.055;
  // v2 = 0.999·0.00025 + 0.001·1 = 0.00124975; m̂ = −0.055/0.19 = −0.289473684;
  // v̂ = 0.00124975/0.001999 = 0.625187594, √v̂ = 0.790688051;
  // p2 = 0.9 + 0.1·0.289473684/0.790688051 = 0.9 + 0.036610... = 0.936610...
  double m2 = -0.055, v2 = 0.00124975;
  double p1 = 1 - 0.1 * 0.5 / (0.5 + 1e-8);
  double p2 = p1 - 0.1 * (m2 / 0.19) / (std::sqrt(v2 / 0.001999) + 1e-8);
  EXPECT_NEAR(p2, 0.93661, 1e-5);  // the arithmetic in the comment
  expect_near(values(p), {p2, adam_ref(-1, {-2, 1}, 0.1, 0, false)}, tol());
  EXPECT_NEAR(adam_ref(1, {0.5, -1}, 0.1, 0, false), p2, 1e-12);
  auto st = opt.state();
  ASSERT_EQ(st.size(), 4u);
  EXPECT_EQ(st[2].first, "state.0.exp_avg");
  EXPECT_EQ(st[3].first, "state.0.exp_avg_sq");
  expect_near(values(st[2].second), {-0.055, 0.9 * -0.2 + 0.1}, tol());
  expect_near(values(st[3].second), {0.00124975, 0.999 * 0.004 + 0.001}, tol());
}

TEST_P(OptimDtypes, AdamL2WeightDecayFoldsIntoTheGradient) {
  // Adam with wd 0.5: g ← g + 0.5·p. p0 = 2, g = 0 → effective gradient 1, so the first step
  // moves by lr·1/(1 + ε) = 0.01 (Adam's first step is ±lr whatever the gradient's size).
  Tensor p = param({2}, GetParam());
  Adam opt({p}, 0.01, {0.9, 0.999}, 1e-8, 0.5);
  set_grad(p, {0});
  opt.step();
  expect_near(values(p), {2 - 0.01 / (1 + 1e-8)}, tol());
  // Second step: g = 0.5·p1 = 0.995; m2 = 0.9·0.1 + 0.1·0.995 = 0.1895;
  // v2 = 0.999·0.001 + 0.001·0.995² = 0.001989025;
  // p2 = p1 − 0.01·(0.1895/0.19)/(√(0.001989025/0.001999) + 1e-8)
  set_grad(p, {0});
  opt.step();
  double p1 = 2 - 0.01 / (1 + 1e-8);
  double g = 0.5 * p1, m2 = 0.09 + 0.1 * g, v2 = 0.999 * 0.001 + 0.001 * g * g;
  expect_near(values(p), {p1 - 0.01 * (m2 / 0.19) / (std::sqrt(v2 / 0.001999) + 1e-8)}, tol());
}

TEST_P(OptimDtypes, AdamWDecoupledDecay) {
  // AdamW lr 0.1, wd 0.1: p ← p·(1 − 0.01) first, then the Adam step on the raw gradient.
  // p0 = [1, 3], g1 = [0.2, 0] (zero gradient: only the decay moves it).
  Tensor p = param({1, 3}, GetParam());
  AdamW opt({p}, 0.1);  // default weight_decay 1e-2
  set_grad(p, {0.2, 0});
  opt.step();
  // element 0: 1·(1 − 0.001) − 0.1·0.2/(0.2 + 1e-8) = 0.999 − 0.1 (+5e-9) ≈ 0.899
  // element 1: 3·0.999 − 0 = 2.997 (m = 0, so no Adam move)
  expect_near(values(p), {0.999 - 0.1 * 0.2 / (0.2 + 1e-8), 2.997}, tol());
  AdamW strong({param({1}, GetParam())}, 0.1, {0.9, 0.999}, 1e-8, 0.5);
  Tensor q = strong.params()[0];
  set_grad(q, {1});
  strong.step();
  // 1·(1 − 0.05) − 0.1·1/(1 + 1e-8) = 0.85
  expect_near(values(q), {0.95 - 0.1 / (1 + 1e-8)}, tol());
  set_grad(q, {-1});
  strong.step();
  // p1 = 0.85; decay → 0.8075; m2 = 0.09 − 0.1 = −0.01, v2 = 0.000999 + 0.001 = 0.001999;
  // m̂ = −0.01/0.19, v̂ = 1 → p2 = 0.8075 + 0.1·(0.01/0.19)/(1 + 1e-8) ≈ 0.81276
  double p1 = 0.95 - 0.1 / (1 + 1e-8);
  expect_near(values(q), {p1 * 0.95 + 0.1 * (0.01 / 0.19) / (1 + 1e-8)}, tol());
}

INSTANTIATE_TEST_SUITE_P(Optim, OptimDtypes, ::testing::Values(DType::F32, DType::F64),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(Optim, ParametersWithoutGradientAreSkipped) {
  Tensor a = param({1}), b = param({1});
  Adam opt({a, b}, 0.1);
  set_grad(a, {1});
  opt.step();
  EXPECT_NEAR(a.item(), 0.9, 1e-7);
  EXPECT_EQ(b.item(), 1.0) << "no gradient: untouched";
  auto st = opt.state();
  for (auto& [name, t] : st) EXPECT_EQ(name.find("state.1."), std::string::npos) << name;
  // b's first update later uses t = 1 for its own bias correction (per-parameter step counts).
  set_grad(b, {-3});
  opt.step();
  EXPECT_NEAR(b.item(), 1.1, 1e-7);
  opt.zero_grad();
  EXPECT_FALSE(a.grad().defined());
  EXPECT_FALSE(b.grad().defined());
  opt.step();  // nothing has a gradient: a no-op
  EXPECT_NEAR(b.item(), 1.1, 1e-7);
}

TEST(Optim, ManyParametersLargeAndSmallInOneCall) {
  // Exercises the chunked, threaded CPU kernel: one big tensor and several small ones, checked
  // against the scalar SGD-with-momentum formula element by element.
  Generator gen(5);
  std::vector<Tensor> ps;
  for (int64_t n : {100000, 3, 17, 8192, 8193})
    ps.push_back(Tensor::normal({n}, 0, 1, DType::F32, Device::cpu(), &gen).set_requires_grad());
  std::vector<std::vector<float>> p0, g1, g2;
  SGD opt(ps, 0.05, 0.9, 0.1, 0.01);
  for (auto& p : ps) {
    p0.push_back(p.to_float_vector());
    p.set_grad(Tensor::normal(p.shape(), 0, 1, DType::F32, Device::cpu(), &gen));
    g1.push_back(p.grad().to_float_vector());
  }
  opt.step();
  for (auto& p : ps) {
    p.set_grad(Tensor::normal(p.shape(), 0, 1, DType::F32, Device::cpu(), &gen));
    g2.push_back(p.grad().to_float_vector());
  }
  opt.step();
  for (size_t k = 0; k < ps.size(); ++k) {
    std::vector<float> got = ps[k].to_float_vector();
    for (size_t i = 0; i < got.size(); ++i) {
      double p = p0[k][i];
      double d = g1[k][i] + 0.01 * p, b = d;
      p -= 0.05 * b;
      d = g2[k][i] + 0.01 * p;
      b = 0.9 * b + 0.9 * d;
      p -= 0.05 * b;
      ASSERT_NEAR(got[i], p, 1e-5) << "tensor " << k << " element " << i;
    }
  }
}

TEST(Optim, StateRoundTripContinuesIdentically) {
  // Two optimizers over equal parameters: one runs 3 steps; the other runs 2, saves its state,
  // a third optimizer loads it and runs the third step: the results must agree exactly.
  auto grads = std::vector<std::vector<double>>{{0.3, -0.2}, {1.0, 0.5}, {-0.4, 0.9}};
  Tensor a = param({1, 2});
  Adam full({a}, 0.05);
  for (auto& g : grads) {
    set_grad(a, g);
    full.step();
  }
  Tensor b = param({1, 2});
  Adam first({b}, 0.05);
  for (int i = 0; i < 2; ++i) {
    set_grad(b, grads[i]);
    first.step();
  }
  optim::NamedTensors saved = first.state();
  Adam resumed({b}, 0.05);
  resumed.load_state(saved);
  set_grad(b, grads[2]);
  resumed.step();
  EXPECT_EQ(values(b), values(a));
  EXPECT_EQ(resumed.state()[1].second.item(), 3);
}

TEST(Optim, LoadStateErrorsNameKeyAndShapes) {
  Tensor p = param({1, 2, 3});
  SGD opt({p}, 0.1, 0.9);
  auto expect_error = [&](const optim::NamedTensors& st, std::vector<std::string> parts) {
    try {
      opt.load_state(st);
      ADD_FAILURE() << "expected an error";
    } catch (const Error& e) {
      for (auto& s : parts) EXPECT_NE(std::string(e.what()).find(s), std::string::npos) << e.what();
    }
  };
  expect_error({{"state.0.momentum_buffer", Tensor::zeros({2}, DType::F64)}},
               {"state.0.momentum_buffer", "[2]", "[3]"});
  expect_error({{"state.4.momentum_buffer", Tensor::zeros({3}, DType::F64)}}, {"state.4"});
  expect_error({{"state.0.exp_avg", Tensor::zeros({3}, DType::F64)}}, {"state.0.exp_avg", "SGD"});
  expect_error({{"bogus", Tensor::zeros({1})}}, {"bogus"});
  EXPECT_THROW(SGD({p}, 0.1, 0, 0, 0, /*nesterov=*/true), Error);
  EXPECT_THROW(Adam({p}, 0.1, {1.5, 0.9}), Error);
}

TEST(Optim, LearningRateAndGradientMismatch) {
  Tensor good = param({3}), p = param({1, 2});
  SGD opt({good, p}, 0.1, 0.9);
  opt.set_lr(0.5);
  EXPECT_EQ(opt.lr(), 0.5);
  EXPECT_THROW(opt.set_lr(-1), Error);
  set_grad(good, {1});
  p.set_grad(Tensor::zeros({2}, DType::F32));
  try {
    opt.step();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("float32"), std::string::npos) << e.what();
  }
  // The failed step changed nothing, not even for the parameter before the bad one.
  EXPECT_EQ(opt.state().size(), 1u) << "only lr";
  EXPECT_EQ(good.item(), 3.0);
}

TEST(Optim, TrainsALinearModelOnAQuadratic) {
  // Minimise ‖W·x − y‖² for a fixed teacher through autograd: each optimizer must get close.
  Generator gen(11);
  Tensor x = Tensor::normal({64, 4}, 0, 1, DType::F32, Device::cpu(), &gen);
  Tensor teacher = Tensor::normal({3, 4}, 0, 1, DType::F32, Device::cpu(), &gen);
  Tensor y = linear(x, teacher);
  for (int which = 0; which < 3; ++which) {
    Tensor w = Tensor::zeros({3, 4}).set_requires_grad();
    std::unique_ptr<optim::Optimizer> opt;
    if (which == 0) opt = std::make_unique<SGD>(std::vector<Tensor>{w}, 0.1, 0.9);
    if (which == 1) opt = std::make_unique<Adam>(std::vector<Tensor>{w}, 0.05);
    if (which == 2)
      opt =
          std::make_unique<AdamW>(std::vector<Tensor>{w}, 0.05, std::pair{0.9, 0.999}, 1e-8, 1e-4);
    double loss = 0;
    for (int it = 0; it < 300; ++it) {
      opt->zero_grad();
      Tensor l = mean(square(sub(linear(x, w), y)));
      l.backward();
      opt->step();
      loss = l.item();
    }
    EXPECT_LT(loss, 1e-3) << opt->name();
  }
}

}  // namespace
}  // namespace freight
