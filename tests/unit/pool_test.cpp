// max_pool2d and avg_pool2d beyond the op table: PyTorch's tie and NaN rules, padding that never
// wins a maximum, and the errors.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
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

TEST(MaxPool2d, TiesSendTheGradientToTheFirstMaximum) {
  // One 2x4 plane of equal values, 2x2 windows: each window's gradient goes to its top-left.
  for (DType dtype : {DType::F32, DType::F64}) {
    Tensor x = Tensor::full({1, 1, 2, 4}, 3.0, dtype).set_requires_grad();
    Tensor y = max_pool2d(x, {2, 2});
    EXPECT_EQ(y.shape(), (Shape{1, 1, 1, 2}));
    sum(y).backward();
    EXPECT_EQ(x.grad().to_double_vector(), (std::vector<double>{1, 0, 1, 0, 0, 0, 0, 0}));
  }
}

TEST(MaxPool2d, OverlappingWindowsAccumulateGradients) {
  // 1x3 windows with stride 1 over [0, 5, 1, 2]: the 5 is the maximum of both windows.
  Tensor x = Tensor::from_vector(std::vector<double>{0, 5, 1, 2}, {1, 1, 1, 4}).set_requires_grad();
  Tensor y = max_pool2d(x, {1, 3}, {1, 1});
  EXPECT_EQ(y.to_double_vector(), (std::vector<double>{5, 5}));
  sum(y).backward();
  EXPECT_EQ(x.grad().to_double_vector(), (std::vector<double>{0, 2, 0, 0}));
}

TEST(MaxPool2d, PaddingNeverWinsAndNanPropagates) {
  // All values negative: zero padding would win; -inf padding must not.
  Tensor x = Tensor::full({1, 1, 2, 2}, -4.0, DType::F32);
  Tensor y = max_pool2d(x, {3, 3}, {1, 1}, {1, 1});
  for (double v : y.to_double_vector()) EXPECT_EQ(v, -4.0);
  Tensor z = Tensor::from_vector(
      std::vector<double>{1, std::numeric_limits<double>::quiet_NaN(), 2, 3}, {1, 1, 2, 2});
  EXPECT_TRUE(std::isnan(max_pool2d(z, {2, 2}).item()));
}

TEST(AvgPool2d, PaddingCountsInTheDivisor) {
  // A 2x2 plane of ones, 3x3 windows with padding 1: every window holds 4 ones of 9 positions.
  Tensor x = Tensor::ones({1, 1, 2, 2}, DType::F64).set_requires_grad();
  Tensor y = avg_pool2d(x, {3, 3}, {1, 1}, {1, 1});
  for (double v : y.to_double_vector()) EXPECT_NEAR(v, 4.0 / 9.0, 1e-15);
  sum(y).backward();  // every input is in all 4 windows
  for (double v : x.grad().to_double_vector()) EXPECT_NEAR(v, 4.0 / 9.0, 1e-15);
}

TEST(Pool2d, ErrorsNameTheOpAndShapes) {
  Tensor x = Tensor::zeros({2, 3, 4, 4});
  std::string m = error_of([&] { max_pool2d(x, {7, 2}, {1, 1}, {1, 0}); });
  EXPECT_NE(m.find("max_pool2d"), std::string::npos) << m;
  EXPECT_NE(m.find("larger than the padded input 6x4"), std::string::npos) << m;
  EXPECT_NE(m.find("[2, 3, 4, 4]"), std::string::npos) << m;

  m = error_of([&] { avg_pool2d(x, {2, 2}, {2, 2}, {2, 0}); });
  EXPECT_NE(m.find("avg_pool2d"), std::string::npos) << m;
  EXPECT_NE(m.find("at most half the kernel"), std::string::npos) << m;

  m = error_of([&] { max_pool2d(Tensor::zeros({4, 4}), {2, 2}); });
  EXPECT_NE(m.find("max_pool2d"), std::string::npos) << m;
  EXPECT_NE(m.find("[4, 4]"), std::string::npos) << m;
}

}  // namespace
}  // namespace freight
