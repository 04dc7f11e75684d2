// softmax / log_softmax: normalisation along the chosen dimension, stability for large logits,
// strided inputs.
#include <gtest/gtest.h>

#include <cmath>

#include "common/test_util.h"
#include "freight/freight.h"

namespace freight {
namespace {

// Sums of `y` [outer, n, inner] along the middle axis.
std::vector<double> slice_sums(const Tensor& y, int64_t dim) {
  Shape s = y.shape();
  int64_t outer = 1, n = s[dim], inner = 1;
  for (int64_t k = 0; k < dim; ++k) outer *= s[k];
  for (int64_t k = dim + 1; k < int64_t(s.size()); ++k) inner *= s[k];
  std::vector<double> v = y.to_double_vector(), sums;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      double acc = 0;
      for (int64_t r = 0; r < n; ++r) acc += v[(o * n + r) * inner + i];
      sums.push_back(acc);
    }
  return sums;
}

TEST(Softmax, SlicesSumToOneAlongEveryDimension) {
  Generator gen(5);
  // [64, 1000] along the last dimension is above the threading grain.
  for (DType dtype : {DType::F32, DType::F64}) {
    Tensor x = Tensor::normal({64, 1000}, 0, 3, dtype, Device::cpu(), &gen);
    std::vector<double> sums = slice_sums(softmax(x, -1), 1);
    ASSERT_EQ(sums.size(), 64u);
    for (double s : sums) EXPECT_NEAR(s, 1.0, 1e-5);
    Tensor x3 = Tensor::normal({3, 70, 200}, 0, 3, dtype, Device::cpu(), &gen);
    for (int64_t d = 0; d < 3; ++d) {
      Tensor y = softmax(x3, d);
      std::vector<double> v = y.to_double_vector();
      for (double e : v) EXPECT_TRUE(e >= 0.0 && e <= 1.0);
      for (double s : slice_sums(y, d)) EXPECT_NEAR(s, 1.0, 1e-5) << "dim " << d;
      for (double s : slice_sums(exp(log_softmax(x3, d)), d))
        EXPECT_NEAR(s, 1.0, 1e-5) << "log_softmax dim " << d;
    }
  }
}

TEST(Softmax, LargeLogitsStayFinite) {
  // Without subtracting the max, exp(1000) overflows to inf and the result is NaN.
  Tensor x = Tensor::from_vector(std::vector<float>{1000, 1001, 1002, -1000}, {1, 4});
  std::vector<float> y = softmax(x).to_float_vector();
  double z = 1 + std::exp(-1.0) + std::exp(-2.0);
  EXPECT_NEAR(y[0], std::exp(-2.0) / z, 1e-6);
  EXPECT_NEAR(y[1], std::exp(-1.0) / z, 1e-6);
  EXPECT_NEAR(y[2], 1.0 / z, 1e-6);
  EXPECT_NEAR(y[3], 0.0, 1e-30);
  std::vector<float> ly = log_softmax(x).to_float_vector();
  EXPECT_NEAR(ly[2], -std::log(z), 1e-5);
  EXPECT_NEAR(ly[3], -2002 - std::log(z), 1e-2);
}

// Logits masked with −inf or a large negative number get a probability of exactly 0, as in
// PyTorch, along the last dimension (rows long and short: the blocked path of short rows) and
// along another; log_softmax keeps them at −inf or at the shifted value, and cross_entropy's
// gradient is 0 there.
TEST(Softmax, MaskedLogitsGetExactlyZero) {
  for (DType dt : {DType::F32, DType::F64})
    for (int64_t n : {3, 10, 100}) {
      std::vector<double> v(size_t(2 * n));
      for (int64_t i = 0; i < 2 * n; ++i) v[i] = double(i % 5) * 0.3;
      v[1] = -INFINITY, v[n + 2] = -1e9, v[n] = -100.0;
      Tensor x = Tensor::from_vector(v, {2, n}).to(dt);
      for (int64_t dim : {1, 0}) {
        Tensor xd = dim == 1 ? x : transpose(x, 0, 1).contiguous();
        std::vector<double> y = softmax(xd, dim).to_double_vector();
        std::vector<double> ly = log_softmax(xd, dim).to_double_vector();
        auto at = [&](int64_t r, int64_t c) { return dim == 1 ? r * n + c : c * 2 + r; };
        for (auto [r, c] : {std::pair<int64_t, int64_t>{0, 1}, {1, 2}, {1, 0}}) {
          // −100 (row 1, column 0) is e^−100 ≈ 4e-44 in float64, a subnormal in float32,
          // which the CPU threads flush to 0.
          if (c == 0 && dt == DType::F64)
            EXPECT_GT(y[at(r, c)], 0.0);
          else
            EXPECT_EQ(y[at(r, c)], 0.0) << "n " << n << ", dim " << dim << ", row " << r;
          EXPECT_LT(y[at(r, c)], 1e-40);
          EXPECT_LT(ly[at(r, c)], -99.0);
        }
        EXPECT_EQ(ly[at(0, 1)], -INFINITY);
        for (double p : y) EXPECT_TRUE(std::isfinite(p));
      }
      Tensor logits = x.detach().set_requires_grad();
      Tensor labels = Tensor::from_vector(std::vector<int64_t>{0, 1}, {2});
      cross_entropy(logits, labels).backward();
      std::vector<double> g = logits.grad().to_double_vector();
      EXPECT_EQ(g[1], 0.0);
      EXPECT_EQ(g[n + 2], 0.0);
    }
}

TEST(Softmax, StridedInputMatchesPackedCopy) {
  Generator gen(6);
  Tensor x = Tensor::normal({5, 7}, 0, 1, DType::F64, Device::cpu(), &gen);
  Tensor xt = x.t();  // [7, 5], not contiguous
  ASSERT_FALSE(xt.is_contiguous());
  EXPECT_TRUE(test::all_close(softmax(xt, 1), softmax(xt.contiguous(), 1), 1e-15, 0));
  EXPECT_TRUE(test::all_close(log_softmax(xt, 0), log_softmax(xt.contiguous(), 0), 1e-15, 0));
}

TEST(Softmax, ErrorsNameTheOp) {
  try {
    (void)softmax(Tensor::zeros({2, 3}), 2);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("softmax"), std::string::npos) << e.what();
  }
  try {
    (void)log_softmax(Tensor::from_vector(std::vector<int64_t>{1, 2}, {2}));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("log_softmax"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace freight
