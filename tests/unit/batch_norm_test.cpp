// batch_norm beyond the op table: the running statistics against hand computations (PyTorch's
// momentum convention and unbiased variance), evaluation mode, and the errors.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>

#include "common/test_util.h"
#include "freight/freight.h"

namespace freight {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// x [4, 2]: channel 0 holds 1, 2, 3, 4 and channel 1 holds 2, 4, 6, 12.
Tensor two_channels(DType dtype) {
  return Tensor::from_vector(std::vector<double>{1, 2, 2, 4, 3, 6, 4, 12}, {4, 2}).to(dtype);
}

TEST(BatchNorm, RunningStatisticsFollowPyTorch) {
  for (DType dtype : {DType::F64, DType::F32}) {
    Tensor x = two_channels(dtype);
    Tensor rm = Tensor::zeros({2}, dtype), rv = Tensor::ones({2}, dtype);
    Tensor y = batch_norm(x, Tensor(), Tensor(), rm, rv, true, 0.1, 1e-5);
    // Channel 0: mean 2.5, squared deviations 2.25 + 0.25 + 0.25 + 2.25 = 5, so the biased
    // variance is 5/4 = 1.25 and the unbiased one 5/3. Channel 1: mean 6, deviations²
    // 16 + 4 + 0 + 36 = 56, unbiased variance 56/3.
    // running_mean = 0.9·0 + 0.1·mean; running_var = 0.9·1 + 0.1·unbiased variance.
    std::vector<double> m = rm.to_double_vector(), v = rv.to_double_vector();
    EXPECT_NEAR(m[0], 0.25, 1e-6);
    EXPECT_NEAR(m[1], 0.6, 1e-6);
    EXPECT_NEAR(v[0], 0.9 + 0.1 * 5.0 / 3.0, 1e-6);
    EXPECT_NEAR(v[1], 0.9 + 0.1 * 56.0 / 3.0, 1e-5);
    // The output is normalised with the biased variance.
    std::vector<double> out = y.to_double_vector();
    EXPECT_NEAR(out[0], (1 - 2.5) / std::sqrt(1.25 + 1e-5), 1e-5);
    EXPECT_NEAR(out[7], (12 - 6) / std::sqrt(14.0 + 1e-5), 1e-5);
    // A second step moves them again by the same rule.
    batch_norm(x, Tensor(), Tensor(), rm, rv, true, 0.1, 1e-5);
    EXPECT_NEAR(rm.to_double_vector()[0], 0.9 * 0.25 + 0.1 * 2.5, 1e-6);
    EXPECT_NEAR(rv.to_double_vector()[0], 0.9 * (0.9 + 0.1 * 5.0 / 3.0) + 0.1 * 5.0 / 3.0, 1e-6);
  }
}

TEST(BatchNorm, RunningStatisticsOfImagesCountEveryPixel) {
  // x [2, 1, 1, 2] = 1, 3 | 5, 7: one channel of 4 values, mean 4, deviations² 9 + 1 + 1 + 9 =
  // 20, unbiased variance 20/3. Momentum 0.5.
  Tensor x = Tensor::from_vector(std::vector<double>{1, 3, 5, 7}, {2, 1, 1, 2});
  Tensor rm = Tensor::full({1}, 2.0, DType::F64), rv = Tensor::full({1}, 3.0, DType::F64);
  batch_norm(x, Tensor(), Tensor(), rm, rv, true, 0.5, 1e-5);
  EXPECT_NEAR(rm.item(), 0.5 * 2 + 0.5 * 4, 1e-12);
  EXPECT_NEAR(rv.item(), 0.5 * 3 + 0.5 * 20.0 / 3.0, 1e-12);
}

TEST(BatchNorm, EvaluationUsesRunningStatisticsAndLeavesThem) {
  Tensor x = two_channels(DType::F64).set_requires_grad();
  Tensor w = Tensor::from_vector(std::vector<double>{2, -1}, {2}).set_requires_grad();
  Tensor b = Tensor::from_vector(std::vector<double>{0.5, 1}, {2}).set_requires_grad();
  Tensor rm = Tensor::from_vector(std::vector<double>{1, 3}, {2});
  Tensor rv = Tensor::from_vector(std::vector<double>{4, 9}, {2});
  Tensor y = batch_norm(x, w, b, rm, rv, false, 0.1, 0.0 + 1e-5);
  std::vector<double> out = y.to_double_vector();
  EXPECT_NEAR(out[0], (1 - 1) / std::sqrt(4 + 1e-5) * 2 + 0.5, 1e-12);
  EXPECT_NEAR(out[3], (4 - 3) / std::sqrt(9 + 1e-5) * -1 + 1, 1e-12);
  EXPECT_EQ(rm.to_double_vector(), (std::vector<double>{1, 3}));
  EXPECT_EQ(rv.to_double_vector(), (std::vector<double>{4, 9}));
  // A training step updates the running statistics in place before this graph's backward: the
  // gradient must still use the statistics of its own forward.
  batch_norm(x.detach(), Tensor(), Tensor(), rm, rv, true, 0.5, 1e-5);
  sum(y).backward();
  std::vector<double> gx = x.grad().to_double_vector();
  EXPECT_NEAR(gx[0], 2 / std::sqrt(4 + 1e-5), 1e-12);
  EXPECT_NEAR(gx[1], -1 / std::sqrt(9 + 1e-5), 1e-12);
  std::vector<double> gw = w.grad().to_double_vector();
  // Σ x̂ over channel 0 with mean 1, std 2: (0 + 1 + 2 + 3)/2.
  EXPECT_NEAR(gw[0], 6 / std::sqrt(4 + 1e-5), 1e-9);
  EXPECT_EQ(b.grad().to_double_vector(), (std::vector<double>{4, 4}));
}

TEST(BatchNorm, LargeMeanKeepsTheVariance) {
  // Channel values 1e4 + N(0, 1) in float32: E[x²] − E[x]² would lose the variance entirely.
  Generator gen(3);
  Tensor x = add_scalar(Tensor::normal({256, 2, 3, 3}, 0, 1, DType::F64, Device::cpu(), &gen), 1e4);
  Tensor rm = Tensor::zeros({2}), rv = Tensor::zeros({2});
  batch_norm(x.to(DType::F32), Tensor(), Tensor(), rm, rv, true, 1.0, 1e-5);
  Tensor rm64 = Tensor::zeros({2}, DType::F64), rv64 = Tensor::zeros({2}, DType::F64);
  batch_norm(x, Tensor(), Tensor(), rm64, rv64, true, 1.0, 1e-5);
  for (int ch = 0; ch < 2; ++ch) {
    EXPECT_NEAR(rv.to_double_vector()[ch], rv64.to_double_vector()[ch], 2e-3);
    EXPECT_NEAR(rv64.to_double_vector()[ch], 1.0, 0.1);
  }
}

TEST(BatchNorm, TrainingWithoutRunningStatistics) {
  Tensor x = two_channels(DType::F32);
  Tensor y = batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), true);
  EXPECT_NEAR(y.to_double_vector()[0], -1.5 / std::sqrt(1.25 + 1e-5), 1e-5);
}

// A channel holding an infinity or a NaN gets NaN statistics, as in PyTorch: mean ±∞ or NaN,
// variance NaN (∞ − ∞), so every output of that channel and its running variance are NaN (the
// variance's clamp at 0 once turned the NaN into 0: outputs ±∞, running variance finite). The
// other channels are untouched. With and without the fused ReLU, float32 and float64.
TEST(BatchNorm, InfinityOrNanMakesItsChannelNan) {
  for (DType dtype : {DType::F32, DType::F64})
    for (bool relu : {false, true})
      for (double bad : {INFINITY, -INFINITY, NAN}) {
        Generator gen(5);
        Tensor x = Tensor::normal({4, 3, 2, 2}, 0, 1, DType::F64, Device::cpu(), &gen);
        x.data<double>()[(2 * 3 + 1) * 4 + 3] = bad;  // sample 2, channel 1, not its first value
        x = x.to(dtype);
        Tensor rm = Tensor::zeros({3}, dtype), rv = Tensor::ones({3}, dtype);
        Tensor y = relu ? batch_norm_relu(x, Tensor(), Tensor(), rm, rv, true, 0.1, 1e-5)
                        : batch_norm(x, Tensor(), Tensor(), rm, rv, true, 0.1, 1e-5);
        std::vector<double> out = y.to_double_vector();
        for (int64_t i = 0; i < 4; ++i)
          for (int64_t ch = 0; ch < 3; ++ch)
            for (int64_t j = 0; j < 4; ++j) {
              const double v = out[(i * 3 + ch) * 4 + j];
              if (ch == 1)
                EXPECT_TRUE(std::isnan(v)) << "x holds " << bad << ", relu " << relu << ": " << v;
              else
                EXPECT_TRUE(std::isfinite(v));
            }
        std::vector<double> m = rm.to_double_vector(), v = rv.to_double_vector();
        EXPECT_TRUE(std::isnan(v[1])) << "running variance " << v[1] << " with " << bad;
        EXPECT_EQ(std::isnan(m[1]), std::isnan(bad));
        EXPECT_TRUE(std::isfinite(m[0]) && std::isfinite(v[0]) && std::isfinite(m[2]) &&
                    std::isfinite(v[2]));
      }
}

TEST(BatchNorm, ErrorsNameTheOpAndShapes) {
  Tensor x = Tensor::zeros({4, 3, 5, 5});
  std::string m =
      error_of([&] { batch_norm(x, Tensor::ones({2}), Tensor(), Tensor(), Tensor(), true); });
  EXPECT_NE(m.find("batch_norm"), std::string::npos) << m;
  EXPECT_NE(m.find("weight [2]"), std::string::npos) << m;
  EXPECT_NE(m.find("[4, 3, 5, 5]"), std::string::npos) << m;

  m = error_of(
      [&] { batch_norm(x, Tensor(), Tensor(), Tensor::zeros({4}), Tensor::ones({4}), true); });
  EXPECT_NE(m.find("running_mean [4]"), std::string::npos) << m;

  m = error_of([&] { batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), false); });
  EXPECT_NE(m.find("evaluation needs running_mean"), std::string::npos) << m;

  m = error_of([&] {
    batch_norm(Tensor::zeros({1, 3}), Tensor(), Tensor(), Tensor(), Tensor(), true);
  });
  EXPECT_NE(m.find("more than one value per channel"), std::string::npos) << m;
  EXPECT_NE(m.find("[1, 3]"), std::string::npos) << m;

  m = error_of(
      [&] { batch_norm(Tensor::zeros({4}), Tensor(), Tensor(), Tensor(), Tensor(), true); });
  EXPECT_NE(m.find("[4]"), std::string::npos) << m;
}

}  // namespace
}  // namespace freight
