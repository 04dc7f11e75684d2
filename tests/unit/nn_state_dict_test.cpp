// state_dict names, order and shapes for a model mixing Linear, Conv2d, BatchNorm2d and a
// two-layer LSTM (as PyTorch lists them), loading round trips and loading errors.
#include <gtest/gtest.h>

#include <cmath>

#include "common/test_util.h"
#include "freight/freight.h"
#include "freight/nn/nn.h"

namespace freight {
namespace {

using namespace freight::nn;

std::vector<std::pair<std::string, Shape>> layout(const NamedTensors& list) {
  std::vector<std::pair<std::string, Shape>> out;
  for (auto& [n, t] : list) out.emplace_back(n, t.shape());
  return out;
}

std::shared_ptr<Sequential> mixed() {
  return std::make_shared<Sequential>(std::initializer_list<ModulePtr>{
      std::make_shared<Linear>(4, 3), std::make_shared<Conv2d>(2, 5, 3),
      std::make_shared<BatchNorm2d>(5), std::make_shared<LSTM>(3, 6, 2)});
}

// A user-defined module: children registered under names of its own.
class Classifier : public Module {
 public:
  Classifier() : Module("Classifier") {
    lstm_ = std::static_pointer_cast<LSTM>(register_module("lstm", std::make_shared<LSTM>(2, 4)));
    head_ = register_module("head", std::make_shared<Linear>(4, 3));
  }
  Tensor forward(const Tensor& x) override { return head_->forward(select((*lstm_)(x), 1, -1)); }

 private:
  std::shared_ptr<LSTM> lstm_;
  ModulePtr head_;
};

TEST(NnStateDict, NamesOrderAndShapesAsPyTorch) {
  auto net = mixed();
  std::vector<std::pair<std::string, Shape>> want = {
      {"0.weight", {3, 4}},
      {"0.bias", {3}},
      {"1.weight", {5, 2, 3, 3}},
      {"1.bias", {5}},
      {"2.weight", {5}},
      {"2.bias", {5}},
      {"2.running_mean", {5}},
      {"2.running_var", {5}},
      {"2.num_batches_tracked", {}},
      {"3.weight_ih_l0", {24, 3}},
      {"3.weight_hh_l0", {24, 6}},
      {"3.bias_ih_l0", {24}},
      {"3.bias_hh_l0", {24}},
      {"3.weight_ih_l1", {24, 6}},
      {"3.weight_hh_l1", {24, 6}},
      {"3.bias_ih_l1", {24}},
      {"3.bias_hh_l1", {24}},
  };
  EXPECT_EQ(layout(net->state_dict()), want);
  // Parameters exclude the buffers; buffers are the BatchNorm statistics.
  std::vector<std::string> params, buffers;
  for (auto& [n, t] : net->named_parameters()) params.push_back(n);
  for (auto& [n, t] : net->named_buffers()) buffers.push_back(n);
  EXPECT_EQ(params.size(), want.size() - 3);
  EXPECT_EQ(buffers,
            (std::vector<std::string>{"2.running_mean", "2.running_var", "2.num_batches_tracked"}));
  EXPECT_EQ(net->state_dict()[8].second.dtype(), DType::I64);

  Classifier clf;
  std::vector<std::pair<std::string, Shape>> want_clf = {
      {"lstm.weight_ih_l0", {16, 2}}, {"lstm.weight_hh_l0", {16, 4}}, {"lstm.bias_ih_l0", {16}},
      {"lstm.bias_hh_l0", {16}},      {"head.weight", {3, 4}},        {"head.bias", {3}},
  };
  EXPECT_EQ(layout(clf.state_dict()), want_clf);
  EXPECT_EQ(clf.to_string(), "Classifier(\n  (lstm): LSTM(2, 4)\n  (head): Linear(4, 3)\n)");
}

TEST(NnStateDict, DefaultInitialisation) {
  manual_seed(9);
  auto net = mixed();
  auto check_uniform = [](const Tensor& t, double bound, const std::string& what) {
    double lo = 0, hi = 0;
    for (float v : t.to_float_vector()) {
      lo = std::min(lo, double(v));
      hi = std::max(hi, double(v));
    }
    EXPECT_GE(lo, -bound) << what;
    EXPECT_LE(hi, bound) << what;
    if (t.numel() >= 50) {
      EXPECT_GT(hi - lo, bound) << what << ": values should spread over the range";
    }
  };
  for (auto& [n, t] : net->state_dict()) {
    if (n.starts_with("1.")) check_uniform(t, 1 / std::sqrt(2.0 * 3 * 3), n);  // fan_in = C·kh·kw
    if (n.starts_with("3.")) check_uniform(t, 1 / std::sqrt(6.0), n);          // 1/√H
  }
  auto& bn = static_cast<BatchNorm2d&>(*(*net)[2]);
  EXPECT_EQ(bn.weight().to_float_vector(), std::vector<float>(5, 1.0f));
  EXPECT_EQ(bn.bias().to_float_vector(), std::vector<float>(5, 0.0f));
  EXPECT_EQ(bn.running_mean().to_float_vector(), std::vector<float>(5, 0.0f));
  EXPECT_EQ(bn.running_var().to_float_vector(), std::vector<float>(5, 1.0f));
  EXPECT_EQ(bn.num_batches_tracked().item(), 0);
  // Embedding ~ N(0, 1).
  Embedding emb(200, 50);
  std::vector<float> e = emb.weight().to_float_vector();
  double m = 0, s = 0;
  for (float v : e) m += v;
  m /= double(e.size());
  for (float v : e) s += (v - m) * (v - m);
  EXPECT_NEAR(m, 0, 0.05);
  EXPECT_NEAR(std::sqrt(s / double(e.size())), 1, 0.05);
}

TEST(NnStateDict, RoundTripRestoresOutputsAndCounters) {
  manual_seed(1);
  auto a = mixed();
  // Train-mode forward through the BatchNorm so its statistics and counter move.
  auto& bn_a = static_cast<BatchNorm2d&>(*(*a)[2]);
  Tensor img = Tensor::normal({4, 5, 3, 3}, 2, 3);
  bn_a(img);
  bn_a(img);
  EXPECT_EQ(bn_a.num_batches_tracked().item(), 2);
  manual_seed(2);
  auto b = mixed();
  b->load_state_dict(a->state_dict());
  for (size_t i = 0; i < a->state_dict().size(); ++i)
    EXPECT_TRUE(test::all_close(b->state_dict()[i].second, a->state_dict()[i].second, 0, 0))
        << a->state_dict()[i].first;
  auto& lstm_a = static_cast<LSTM&>(*(*a)[3]);
  auto& lstm_b = static_cast<LSTM&>(*(*b)[3]);
  Tensor seq = Tensor::normal({2, 5, 3});
  EXPECT_TRUE(test::all_close(lstm_b(seq), lstm_a(seq), 0, 0));
  // The loaded counter continues from 2.
  auto& bn_b = static_cast<BatchNorm2d&>(*(*b)[2]);
  bn_b(img);
  EXPECT_EQ(bn_b.num_batches_tracked().item(), 3);
}

TEST(NnStateDict, LoadErrorsNameKeysAndBothShapes) {
  auto net = mixed();
  NamedTensors sd = net->state_dict();
  sd[3].second = Tensor::zeros({6});                // 1.bias: [6] instead of [5]
  sd[9].second = Tensor::zeros({24, 4});            // 3.weight_ih_l0
  sd.erase(sd.begin() + 6);                         // 2.running_mean missing
  sd.emplace_back("4.weight", Tensor::zeros({1}));  // unexpected
  try {
    net->load_state_dict(sd);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string m = e.what();
    for (const char* part : {"1.bias", "[6]", "[5]", "3.weight_ih_l0", "[24, 4]", "[24, 3]",
                             "2.running_mean", "4.weight"})
      EXPECT_NE(m.find(part), std::string::npos) << "'" << part << "' missing from: " << m;
  }
}

}  // namespace
}  // namespace freight
