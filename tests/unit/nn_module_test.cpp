// Module base behaviour with Linear, activations and containers: names and order, loading,
// mode switching, in-place placement, default initialisation, shapes and FLOPs.
#include <gtest/gtest.h>

#include <cmath>

#include "common/test_util.h"
#include "freight/freight.h"
#include "freight/nn/nn.h"
#include "freight/optim/optim.h"

namespace freight {
namespace {

using namespace freight::nn;

std::vector<std::string> names(const NamedTensors& list) {
  std::vector<std::string> out;
  for (auto& [n, t] : list) out.push_back(n);
  return out;
}

std::shared_ptr<Sequential> mlp() {
  return std::make_shared<Sequential>(std::initializer_list<ModulePtr>{
      std::make_shared<Linear>(4, 8), std::make_shared<ReLU>(), std::make_shared<Linear>(8, 3)});
}

void expect_error_mentions(const std::function<void()>& fn, std::vector<std::string> parts) {
  try {
    fn();
    ADD_FAILURE() << "expected a freight::Error";
  } catch (const Error& e) {
    for (auto& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos)
          << "'" << p << "' missing from: " << e.what();
  }
}

TEST(NnModule, LinearMatchesTheFormulaAndLayout) {
  manual_seed(3);
  Linear lin(3, 2);
  EXPECT_EQ(lin.weight().shape(), (Shape{2, 3}));  // [out, in]
  EXPECT_EQ(lin.bias().shape(), (Shape{2}));
  EXPECT_TRUE(lin.weight().requires_grad());
  Tensor x = Tensor::from_vector(std::vector<float>{1, 2, 3, -1, 0, 2}, {2, 3});
  std::vector<float> w = lin.weight().to_float_vector(), b = lin.bias().to_float_vector();
  std::vector<float> y = lin(x).to_float_vector();
  std::vector<float> xv = x.to_float_vector();
  for (int n = 0; n < 2; ++n)
    for (int o = 0; o < 2; ++o) {
      float want = b[o];
      for (int i = 0; i < 3; ++i) want += xv[n * 3 + i] * w[o * 3 + i];
      EXPECT_NEAR(y[n * 2 + o], want, 1e-5);
    }
  Linear nobias(3, 2, false);
  EXPECT_FALSE(nobias.bias().defined());
  EXPECT_EQ(names(nobias.named_parameters()), (std::vector<std::string>{"weight"}));
  expect_error_mentions([&] { lin(Tensor::zeros({2, 5})); }, {"Linear(3, 2)", "[2, 5]"});
}

TEST(NnModule, DefaultInitBoundsFollowPyTorch) {
  // Linear(in, out): weight and bias ~ U(−1/√in, 1/√in).
  manual_seed(0);
  Linear lin(100, 200);
  double bound = 1 / std::sqrt(100.0);
  std::vector<float> w = lin.weight().to_float_vector();
  double lo = 1, hi = -1, sum = 0;
  for (float v : w) {
    lo = std::min(lo, double(v));
    hi = std::max(hi, double(v));
    sum += v;
  }
  EXPECT_GE(lo, -bound);
  EXPECT_LE(hi, bound);
  EXPECT_LT(lo, -0.95 * bound) << "20000 uniform draws should come close to the bound";
  EXPECT_GT(hi, 0.95 * bound);
  EXPECT_NEAR(sum / double(w.size()), 0.0, 0.01 * bound * 10);
  for (float v : lin.bias().to_float_vector()) EXPECT_LE(std::fabs(v), bound);
  // manual_seed makes initialisation reproducible; a different seed gives other values.
  manual_seed(7);
  Linear a(5, 5);
  manual_seed(7);
  Linear b(5, 5);
  manual_seed(8);
  Linear c(5, 5);
  EXPECT_EQ(a.weight().to_float_vector(), b.weight().to_float_vector());
  EXPECT_NE(a.weight().to_float_vector(), c.weight().to_float_vector());
}

TEST(NnModule, SequentialNamesOrderAndForward) {
  auto net = mlp();
  EXPECT_EQ(names(net->named_parameters()),
            (std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"}));
  EXPECT_EQ(names(net->state_dict()), names(net->named_parameters()));
  EXPECT_EQ(net->num_parameters(), 4 * 8 + 8 + 8 * 3 + 3);
  EXPECT_EQ(net->parameters().size(), 4u);
  EXPECT_TRUE(net->parameters()[0].same(static_cast<Linear&>(*(*net)[0]).weight()))
      << "parameters() returns the live handles";
  Tensor x = Tensor::normal({5, 4});
  Tensor want = (*net)[2]->forward(relu((*net)[0]->forward(x)));
  EXPECT_TRUE(test::all_close((*net)(x), want, 0, 0));
  EXPECT_EQ(net->to_string(),
            "Sequential(\n  (0): Linear(4, 8)\n  (1): ReLU()\n  (2): Linear(8, 3)\n)");
  EXPECT_EQ(net->named_modules().size(), 4u);
  EXPECT_EQ(net->named_modules()[3].first, "2");
}

TEST(NnModule, ResidualNamesAndSum) {
  auto body = std::make_shared<Sequential>(
      std::initializer_list<ModulePtr>{std::make_shared<Linear>(4, 4), std::make_shared<Tanh>()});
  auto shortcut = std::make_shared<Sequential>(
      std::initializer_list<ModulePtr>{std::make_shared<Linear>(4, 4, false)});
  Residual res(body, shortcut);
  EXPECT_EQ(names(res.state_dict()),
            (std::vector<std::string>{"body.0.weight", "body.0.bias", "shortcut.0.weight"}));
  Tensor x = Tensor::normal({3, 4});
  EXPECT_TRUE(test::all_close(res(x), add(body->forward(x), shortcut->forward(x)), 0, 0));
  Residual identity(body);
  EXPECT_EQ(names(identity.state_dict()),
            (std::vector<std::string>{"body.0.weight", "body.0.bias"}));
  EXPECT_TRUE(test::all_close(identity(x), add(body->forward(x), x), 0, 0));
  Residual bad(std::make_shared<Linear>(4, 2));
  expect_error_mentions([&] { bad(x); }, {"Residual", "[3, 2]", "[3, 4]"});
}

TEST(NnModule, LoadStateDictRoundTrip) {
  manual_seed(1);
  auto a = mlp();
  manual_seed(2);
  auto b = mlp();
  Tensor x = Tensor::normal({6, 4});
  EXPECT_GT(test::max_abs_diff((*a)(x), (*b)(x)), 1e-3);
  // Through float64 copies: load converts dtypes and copies values (no aliasing).
  NamedTensors sd;
  for (auto& [n, t] : a->state_dict()) sd.emplace_back(n, t.to(DType::F64));
  b->load_state_dict(sd);
  EXPECT_TRUE(test::all_close((*b)(x), (*a)(x), 1e-6, 1e-7));
  sd[0].second.fill_(0);
  EXPECT_NE(static_cast<Linear&>(*(*b)[0]).weight().to_float_vector()[0], 0.0f);
}

TEST(NnModule, LoadStateDictErrorsNameTheKeyAndShapes) {
  auto net = mlp();
  NamedTensors sd = net->state_dict();
  NamedTensors wrong_shape = sd;
  wrong_shape[2].second = Tensor::zeros({3, 7});
  expect_error_mentions([&] { net->load_state_dict(wrong_shape); },
                        {"2.weight", "[3, 7]", "[3, 8]"});
  NamedTensors missing(sd.begin(), sd.end() - 1);
  expect_error_mentions([&] { net->load_state_dict(missing); }, {"missing", "2.bias", "[3]"});
  NamedTensors extra = sd;
  extra.emplace_back("3.weight", Tensor::zeros({2, 2}));
  expect_error_mentions([&] { net->load_state_dict(extra); }, {"unexpected", "3.weight", "[2, 2]"});
  // Integers are not weights: refused whatever their shape, naming both dtypes.
  NamedTensors integer = sd;
  integer[1].second = Tensor::zeros(integer[1].second.shape(), DType::I32);
  expect_error_mentions([&] { net->load_state_dict(integer); },
                        {"dtype mismatch", "0.bias", "int32", "float32"});
  // Nothing was written by the failed loads.
  std::vector<float> before = sd[0].second.to_float_vector();
  wrong_shape[0].second = Tensor::zeros({8, 4});
  EXPECT_THROW(net->load_state_dict(wrong_shape), Error);
  EXPECT_EQ(net->state_dict()[0].second.to_float_vector(), before);
}

TEST(NnModule, TrainEvalIsRecursive) {
  auto inner = mlp();
  Sequential outer({inner, std::make_shared<Sigmoid>()});
  EXPECT_TRUE(outer.is_training());
  outer.eval();
  EXPECT_FALSE(outer.is_training());
  EXPECT_FALSE(inner->is_training());
  EXPECT_FALSE((*inner)[1]->is_training());
  outer.train();
  EXPECT_TRUE((*inner)[2]->is_training());
}

TEST(NnModule, ToConvertsInPlaceKeepingOptimizerHandles) {
  manual_seed(4);
  auto net = mlp();
  optim::SGD opt(net->parameters(), 0.1);
  Tensor x = Tensor::normal({8, 4});
  sum((*net)(x)).backward();
  net->to(DType::F64);
  for (auto& [n, t] : net->named_parameters()) {
    EXPECT_EQ(t.dtype(), DType::F64) << n;
    EXPECT_EQ(t.grad().dtype(), DType::F64) << n << ": gradients move with their parameters";
  }
  EXPECT_EQ(opt.params()[0].dtype(), DType::F64) << "the optimizer sees the converted tensor";
  std::vector<double> w0 = opt.params()[0].to_double_vector();
  std::vector<double> g0 = opt.params()[0].grad().to_double_vector();
  opt.step();
  std::vector<double> w1 = net->parameters()[0].to_double_vector();
  for (size_t i = 0; i < w0.size(); ++i) EXPECT_NEAR(w1[i], w0[i] - 0.1 * g0[i], 1e-12);
  // A fresh backward after the conversion accumulates into the converted parameters.
  net->zero_grad();
  EXPECT_FALSE(net->parameters()[0].grad().defined());
  sum((*net)(x.to(DType::F64))).backward();
  EXPECT_EQ(net->parameters()[0].grad().dtype(), DType::F64);
  net->to(Device::cpu());  // same device: nothing changes
  EXPECT_EQ(net->parameters()[0].device(), Device::cpu());
}

TEST(NnModule, ToCudaWithoutAGpuIsAClearError) {
  if (cuda_available()) GTEST_SKIP() << "a GPU is present";
  auto net = mlp();
  EXPECT_THROW(net->to(Device::cuda(0)), Error);
}

TEST(NnModule, OutputShapesAndFlops) {
  auto net = mlp();
  EXPECT_EQ(net->output_shape({10, 4}), (Shape{10, 3}));
  // Linear: 2·rows·in·out; ReLU: one per element.
  EXPECT_EQ(net->flops({10, 4}), 2.0 * 10 * 4 * 8 + 10 * 8 + 2.0 * 10 * 8 * 3);
  Flatten flat;
  EXPECT_EQ(flat.output_shape({2, 3, 4, 5}), (Shape{2, 60}));
  EXPECT_EQ(flat(Tensor::zeros({2, 3, 4, 5})).shape(), (Shape{2, 60}));
  EXPECT_EQ(Flatten(0, 1).output_shape({2, 3, 4}), (Shape{6, 4}));
  Reshape rows({28, 28});
  EXPECT_EQ(rows.output_shape({5, 1, 28, 28}), (Shape{5, 28, 28}));
  EXPECT_EQ(rows(Tensor::zeros({5, 1, 28, 28})).shape(), (Shape{5, 28, 28}));
  EXPECT_EQ(Reshape({-1, 4}).output_shape({3, 2, 8}), (Shape{3, 4, 4}));
  expect_error_mentions(
      [&] {
        rows.output_shape({5, 1, 28, 27});
      },
      {"Reshape([28, 28])", "[5, 1, 28, 27]"});
  LastStep last;
  EXPECT_EQ(last.output_shape({2, 7, 5}), (Shape{2, 5}));
  Tensor seq = Tensor::normal({2, 3, 4});
  EXPECT_TRUE(test::all_close(last(seq), seq.select(1, 2), 0, 0));
  expect_error_mentions([&] { net->output_shape({10, 5}); }, {"Linear(4, 8)", "[10, 5]"});
  EXPECT_THROW(last.output_shape({2, 5}), Error);
}

TEST(NnModule, ActivationsMatchTheOps) {
  Tensor x = Tensor::normal({3, 5});
  EXPECT_TRUE(test::all_close(ReLU()(x), relu(x), 0, 0));
  EXPECT_TRUE(test::all_close(Sigmoid()(x), sigmoid(x), 0, 0));
  EXPECT_TRUE(test::all_close(Tanh()(x), tanh(x), 0, 0));
  EXPECT_TRUE(test::all_close(GELU()(x), gelu(x), 0, 0));
  EXPECT_EQ(GELU().describe(), "GELU()");
  EXPECT_EQ(GELU().num_parameters(), 0);
}

}  // namespace
}  // namespace freight
