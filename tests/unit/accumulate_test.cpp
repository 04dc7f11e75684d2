// Gradient accumulation (--accumulate K): K micro-batches of B per optimizer step reach the
// weights of one step per batch of K·B, up to float rounding (the per-sample gradients are
// summed in two parts instead of one), short last groups included.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "common/test_util.h"
#include "freight/freight.h"
#include "freight/training.h"

namespace freight {
namespace {

double max_abs(const nn::NamedTensors& a) {
  double m = 0;
  for (const auto& [n, t] : a)
    for (double v : t.to_double_vector()) m = std::max(m, std::abs(v));
  return m;
}

double max_diff(const nn::NamedTensors& a, const nn::NamedTensors& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    std::vector<double> x = a[i].second.to_double_vector(), y = b[i].second.to_double_vector();
    for (size_t k = 0; k < x.size(); ++k) m = std::max(m, std::abs(x[k] - y[k]));
  }
  return m;
}

TEST(Accumulate, MicroBatchesEqualOneBatchOfTheirSamples) {
  // 200 samples: batches of 64 (4 steps, the last of 8 samples) against micro-batches of 32 in
  // groups of 2 (7 batches: the last group is one batch of 8) or of 16 in groups of 4.
  // fcn5's large weights are updated inside backward when a step is one batch of at most 64
  // rows (Optimizer::set_fused_backward), never in a group of micro-batches: both must agree.
  for (std::string model : {"mlp", "lenet5", "fcn5"}) {
    TrainOptions o;
    o.model = model;
    o.data = "synthetic";
    o.limit_train = 200;
    o.limit_test = 64;
    o.epochs = 2;
    o.optimizer = "sgd";
    o.lr = 0.05;
    o.momentum = 0.9;
    o.schedule = "cosine";  // steps per epoch must count optimizer steps
    o.device = "cpu";
    o.batch_size = 64;
    TrainResult whole = train(o);
    for (auto [micro, k] : {std::pair<int64_t, int64_t>{32, 2}, {16, 4}}) {
      TrainOptions a = o;
      a.batch_size = micro;
      a.accumulate = k;
      TrainResult acc = train(a);
      auto want = whole.model->state_dict(), got = acc.model->state_dict();
      EXPECT_LE(max_diff(got, want), 1e-5 * std::max(1.0, max_abs(want)))
          << model << ", " << k << " x " << micro;
      ASSERT_EQ(acc.epochs.size(), 2u);
      EXPECT_EQ(acc.epochs[1].step, whole.epochs[1].step) << "optimizer steps";
      EXPECT_DOUBLE_EQ(acc.epochs[1].lr, whole.epochs[1].lr);
      EXPECT_NEAR(acc.epochs[1].train_loss, whole.epochs[1].train_loss, 1e-4);
    }
  }
}

TEST(Accumulate, OneIsThePlainStepBitForBit) {
  TrainOptions o;
  o.model = "mlp";
  o.data = "synthetic";
  o.limit_train = 128;
  o.limit_test = 32;
  o.epochs = 1;
  o.device = "cpu";
  TrainResult a = train(o);
  o.accumulate = 1;
  TrainResult b = train(o);
  EXPECT_EQ(max_diff(a.model->state_dict(), b.model->state_dict()), 0.0);
}

}  // namespace
}  // namespace freight
