// dropout: keep rate and scaling, evaluation identity, reproducibility from the seed, the mask
// as defined by Philox, and the backward through the same mask.
#include <gtest/gtest.h>

#include <cmath>

#include "common/test_util.h"
#include "core/philox.h"
#include "freight/freight.h"

namespace freight {
namespace {

std::vector<bool> kept_mask(const Tensor& y) {
  std::vector<bool> m;
  for (double v : y.to_double_vector()) m.push_back(v != 0.0);
  return m;
}

TEST(Dropout, KeepsAboutOneMinusPAndScalesSurvivors) {
  const int64_t n = 1 << 20;
  Tensor x = Tensor::ones({1024, 1024});
  for (double p : {0.1, 0.5, 0.8}) {
    Generator gen(42);
    std::vector<float> y = dropout(x, p, true, &gen).to_float_vector();
    int64_t kept = 0;
    for (float v : y) {
      if (v != 0.0f) {
        ++kept;
        ASSERT_NEAR(v, 1.0 / (1.0 - p), 1e-6);
      }
    }
    // Binomial(n, 1 − p): the standard deviation of the kept fraction is √(p(1−p)/n) < 5e-4.
    EXPECT_NEAR(double(kept) / double(n), 1.0 - p, 3e-3) << "p = " << p;
  }
}

TEST(Dropout, IdentityInEvaluationAndForZeroP) {
  Generator gen(1);
  Tensor x = Tensor::normal({8, 9}, 0, 1, DType::F32, Device::cpu(), &gen);
  uint64_t before = gen.offset();
  EXPECT_EQ(dropout(x, 0.5, false, &gen).to_float_vector(), x.to_float_vector());
  EXPECT_EQ(dropout(x, 0.0, true, &gen).to_float_vector(), x.to_float_vector());
  EXPECT_EQ(gen.offset(), before) << "the identity draws no random numbers";
}

TEST(Dropout, SameSeedSameMaskOtherSeedOtherMask) {
  Tensor x = Tensor::ones({100, 50});
  Generator a(7), b(7), c(8);
  std::vector<bool> ma = kept_mask(dropout(x, 0.5, true, &a));
  EXPECT_EQ(ma, kept_mask(dropout(x, 0.5, true, &b)));
  EXPECT_NE(ma, kept_mask(dropout(x, 0.5, true, &c)));
  // The generator advances by one counter per four elements, so the next call differs.
  EXPECT_EQ(a.offset(), uint64_t((5000 + 3) / 4));
  EXPECT_NE(ma, kept_mask(dropout(x, 0.5, true, &a)));
}

TEST(Dropout, MaskIsThePhiloxStreamAtTheReservedOffset) {
  Generator gen(99);
  gen.reserve(13);  // start somewhere other than 0
  const double p = 0.3;
  Tensor x = Tensor::ones({1001});  // not a multiple of 4
  std::vector<bool> m = kept_mask(dropout(x, p, true, &gen));
  for (uint64_t i = 0; i < m.size(); ++i) {
    bool want = philox::to_unit_float(philox::element(99, 13, i)) >= p;
    ASSERT_EQ(m[i], want) << "element " << i;
  }
}

TEST(Dropout, UsesTheDefaultGeneratorWhenNoneIsGiven) {
  Tensor x = Tensor::ones({64});
  manual_seed(5);
  std::vector<bool> m1 = kept_mask(dropout(x, 0.5, true));
  EXPECT_EQ(default_generator().offset(), 16u);
  manual_seed(5);
  EXPECT_EQ(m1, kept_mask(dropout(x, 0.5, true)));
}

TEST(Dropout, BackwardUsesTheForwardMask) {
  Generator gen(3);
  Tensor x = Tensor::normal({40, 30}, 0, 1, DType::F64, Device::cpu(), &gen).set_requires_grad();
  Generator drop(11);
  Tensor y = dropout(x, 0.25, true, &drop);
  sum(y).backward();
  std::vector<bool> m = kept_mask(y);
  std::vector<double> g = x.grad().to_double_vector();
  for (size_t i = 0; i < g.size(); ++i) EXPECT_DOUBLE_EQ(g[i], m[i] ? 1.0 / 0.75 : 0.0);
}

// Dropout multiplies by the mask's factor (0 or 1/(1 − p)), as PyTorch does: a NaN stays NaN
// whether kept or dropped, a dropped infinity becomes NaN (∞·0), a kept one stays infinite;
// the backward multiplies the same way, so a NaN gradient stays NaN where it was dropped.
TEST(Dropout, NanAndInfinityAreMultipliedByTheMask) {
  for (DType dt : {DType::F32, DType::F64}) {
    const int64_t n = 4001;  // not a multiple of 4: the last Philox counter is partial
    std::vector<double> v(n);
    for (int64_t i = 0; i < n; ++i) v[i] = i % 3 == 0 ? NAN : i % 3 == 1 ? INFINITY : -2.0;
    Tensor x = Tensor::from_vector(v, {n}).to(dt).set_requires_grad();
    Generator gen(21);
    Tensor y = dropout(x, 0.5, true, &gen);
    // The mask, from a finite input through the same stream position.
    Generator again(21);
    std::vector<bool> kept = kept_mask(dropout(Tensor::ones({n}, dt), 0.5, true, &again));
    std::vector<double> out = y.to_double_vector();
    int64_t dropped_inf = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (i % 3 == 0)
        EXPECT_TRUE(std::isnan(out[i])) << "element " << i;
      else if (i % 3 == 1)
        EXPECT_TRUE(kept[i] ? out[i] == INFINITY : std::isnan(out[i])) << "element " << i;
      else
        EXPECT_EQ(out[i], kept[i] ? -4.0 : 0.0) << "element " << i;
      dropped_inf += i % 3 == 1 && !kept[i];
    }
    EXPECT_GT(dropped_inf, 100);
    Tensor gy = Tensor::full({n}, NAN, dt);
    sum(mul(y, gy)).backward();
    for (double g : x.grad().to_double_vector()) EXPECT_TRUE(std::isnan(g));
  }
}

TEST(Dropout, PEqualOneZeroesAndInvalidPIsAnError) {
  Generator gen(2);
  Tensor x = Tensor::ones({10}).set_requires_grad();
  Tensor y = dropout(x, 1.0, true, &gen);
  for (float v : y.to_float_vector()) EXPECT_EQ(v, 0.0f);
  sum(y).backward();
  for (float v : x.grad().to_float_vector()) EXPECT_EQ(v, 0.0f);
  for (double p : {-0.1, 1.5}) {
    try {
      (void)dropout(x, p, true, &gen);
      FAIL() << "expected an error for p = " << p;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("dropout"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace freight
