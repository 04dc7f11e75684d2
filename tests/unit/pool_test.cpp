// max_pool2d and avg_pool2d beyond the op table: PyTorch's tie and NaN rules, padding that never
// wins a maximum, and the errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

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

// Every window shape (not only 2x2, which has its own loop; 3x3 stride 2 padded by 1 has an
// AVX-512 and an AVX2 one, here on rows of 19 and 17 outputs): with many ties, NaNs and −∞, each
// output is the window's maximum by PyTorch's rule in row-major order (a later element wins when
// it is larger or NaN) and its gradient goes to that element; with a fused ReLU (PyTorch's relu:
// a NaN passes), a window whose maximum is <= 0 passes no gradient.
TEST(MaxPool2d, GeneralWindowsFollowTheRowMajorRule) {
  struct Geo {
    int64_t h, w;
    Pair k, s, p;
  };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (const Geo& g : {Geo{9, 9, {3, 3}, {2, 2}, {1, 1}}, Geo{7, 37, {3, 3}, {2, 2}, {1, 1}},
                       Geo{1, 34, {3, 3}, {2, 2}, {1, 1}}, Geo{6, 11, {2, 3}, {1, 2}, {1, 1}},
                       Geo{7, 8, {3, 3}, {1, 1}, {1, 1}}, Geo{10, 13, {5, 5}, {3, 3}, {2, 2}},
                       Geo{5, 12, {1, 4}, {1, 3}, {0, 2}}}) {
    for (bool relu : {false, true}) {
      std::vector<double> v(size_t(2 * 3 * g.h * g.w));
      uint64_t state = 12345;
      for (double& e : v) {  // values in {-1, 0, 1, 2}, about 1 in 32 NaN and 1 in 32 −∞
        state = state * 6364136223846793005ULL + 1442695040888963407ULL;
        const int r = int(state >> 59);
        e = r == 0   ? nan
            : r == 1 ? -std::numeric_limits<double>::infinity()
                     : double(int(r % 4) - 1);
      }
      Tensor x = Tensor::from_vector(v, {2, 3, g.h, g.w}).to(DType::F32).set_requires_grad();
      Tensor y = relu ? relu_max_pool2d(x, g.k, g.s, g.p) : max_pool2d(x, g.k, g.s, g.p);
      sum(y).backward();
      const int64_t oh = y.shape()[2], ow = y.shape()[3];
      std::vector<double> want_y, want_g(v.size(), 0.0);
      for (int64_t plane = 0; plane < 6; ++plane)
        for (int64_t i = 0; i < oh; ++i)
          for (int64_t j = 0; j < ow; ++j) {
            double best = -std::numeric_limits<double>::infinity();
            int64_t at = -1;
            for (int64_t r = i * g.s[0] - g.p[0]; r < i * g.s[0] - g.p[0] + g.k[0]; ++r)
              for (int64_t c = j * g.s[1] - g.p[1]; c < j * g.s[1] - g.p[1] + g.k[1]; ++c) {
                if (r < 0 || r >= g.h || c < 0 || c >= g.w) continue;
                const int64_t pos = (plane * g.h + r) * g.w + c;
                double e = v[size_t(pos)];
                if (relu) e = e < 0 ? 0.0 : e;
                if (at < 0) at = pos;  // the first element in the plane, if nothing beats -inf
                if (e > best || std::isnan(e)) best = e, at = pos;
              }
            want_y.push_back(best);
            if (!relu || !(best <= 0)) want_g[size_t(at)] += 1;
          }
      const std::vector<double> got_y = y.to_double_vector(), got_g = x.grad().to_double_vector();
      ASSERT_EQ(got_y.size(), want_y.size());
      for (size_t k = 0; k < got_y.size(); ++k)
        EXPECT_TRUE(got_y[k] == want_y[k] || (std::isnan(got_y[k]) && std::isnan(want_y[k])))
            << "output " << k << " of kernel " << g.k[0] << "x" << g.k[1] << (relu ? " relu" : "");
      EXPECT_EQ(got_g, want_g) << "kernel " << g.k[0] << "x" << g.k[1] << (relu ? " relu" : "");
    }
  }
}

// A window of −∞ only has no maximum to find: its index (and the gradient) goes to its first
// element in the plane, as the general loops, the AVX-512 path (rows of 19 outputs) and PyTorch
// do it.
TEST(MaxPool2d, WindowsOfMinusInfinityPointAtTheirFirstElement) {
  for (Pair s : {Pair{2, 2}, Pair{1, 1}}) {
    const int64_t h = 5, w = 37;
    Tensor x = Tensor::full({1, 1, h, w}, -std::numeric_limits<double>::infinity(), DType::F32)
                   .set_requires_grad();
    Tensor y = max_pool2d(x, {3, 3}, s, {1, 1});
    sum(y).backward();
    std::vector<double> want(size_t(h * w), 0.0);
    for (int64_t i = 0; i < y.shape()[2]; ++i)
      for (int64_t j = 0; j < y.shape()[3]; ++j)
        want[size_t(std::max<int64_t>(i * s[0] - 1, 0) * w + std::max<int64_t>(j * s[1] - 1, 0))] +=
            1;
    EXPECT_EQ(x.grad().to_double_vector(), want) << "stride " << s[0];
    for (double v : y.to_double_vector()) EXPECT_EQ(v, -std::numeric_limits<double>::infinity());
  }
}

// The 3x3 stride-2 windows (their own two-pass path) against direct sums, with padding 0 and 1
// on odd and even planes: outputs and the gradient of a weighted sum.
TEST(AvgPool2d, ThreeByThreeStrideTwoMatchesDirectSums) {
  for (int64_t pad : {0, 1})
    for (auto [h, w] : {std::pair<int64_t, int64_t>{7, 7}, {8, 6}, {9, 12}, {16, 16}, {3, 5}}) {
      SCOPED_TRACE(testing::Message() << h << "x" << w << " padding " << pad);
      Generator gen(11);
      Tensor x = Tensor::normal({2, 3, h, w}, 0, 1, DType::F64, Device::cpu(), &gen);
      x.set_requires_grad();
      Tensor y = avg_pool2d(x, {3, 3}, {2, 2}, {pad, pad});
      const int64_t oh = (h + 2 * pad - 3) / 2 + 1, ow = (w + 2 * pad - 3) / 2 + 1;
      ASSERT_EQ(y.shape(), (Shape{2, 3, oh, ow}));
      Tensor gy = Tensor::normal(y.shape(), 0, 1, DType::F64, Device::cpu(), &gen);
      y.backward(gy);
      const std::vector<double> xv = x.to_double_vector(), gv = gy.to_double_vector();
      std::vector<double> want_y(size_t(6 * oh * ow)), want_g(xv.size(), 0.0);
      for (int64_t p = 0; p < 6; ++p)
        for (int64_t i = 0; i < oh; ++i)
          for (int64_t j = 0; j < ow; ++j) {
            double sum = 0;
            const size_t at = size_t((p * oh + i) * ow + j);
            for (int64_t r = 2 * i - pad; r < 2 * i - pad + 3; ++r)
              for (int64_t c = 2 * j - pad; c < 2 * j - pad + 3; ++c) {
                if (r < 0 || r >= h || c < 0 || c >= w) continue;
                sum += xv[size_t((p * h + r) * w + c)];
                want_g[size_t((p * h + r) * w + c)] += gv[at] / 9;
              }
            want_y[at] = sum / 9;
          }
      const std::vector<double> got_y = y.to_double_vector(), got_g = x.grad().to_double_vector();
      for (size_t k = 0; k < want_y.size(); ++k) EXPECT_NEAR(got_y[k], want_y[k], 1e-12) << k;
      for (size_t k = 0; k < want_g.size(); ++k) EXPECT_NEAR(got_g[k], want_g[k], 1e-12) << k;
    }
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
