// sum and mean over long float32 runs, rows and columns, against float64 sums of the same values:
// the CPU kernel's partials go into doubles a chunk at a time, so the error stays near that of
// one chunk for any length, vectorised or not (a sanitizer build's loops are not); PyTorch's
// cascade sum is as close. A single pass of SIMD lanes summed a million copies of 0.1 to 99910.
#include <gtest/gtest.h>

#include <cmath>

#include "freight/freight.h"

namespace freight {
namespace {

// Relative error of the float32 sum of `x` along `dims` (all of them when empty) against the
// float64 one.
double sum_error(const Tensor& x, const std::vector<int64_t>& dims) {
  auto sum_along = [&](const Tensor& t) { return dims.empty() ? sum(t) : sum(t, dims); };
  std::vector<double> got = sum_along(x).to_double_vector();
  std::vector<double> want = sum_along(x.to(DType::F64)).to_double_vector();
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i)
    worst = std::max(worst, std::abs(got[i] - want[i]) / std::max(1e-30, std::abs(want[i])));
  return worst;
}

TEST(SumAccuracy, LongRowsAndColumnsStayWithinAFewUlpPerChunk) {
  // A million values of 0.1 (every term rounds the same way: the worst case for a running sum),
  // and uniform values in [0, 1).
  Tensor tenths = Tensor::full({1000000}, 0.1, DType::F32);
  Generator gen(4);
  Tensor u = Tensor::uniform({1000000}, 0, 1, DType::F32, Device::cpu(), &gen);
  for (const Tensor& x : {tenths, u}) {
    EXPECT_LT(sum_error(x, {}), 1e-5);                           // one long row
    EXPECT_LT(sum_error(x.reshape({4, 250000}), {1}), 1e-5);     // rows, split over threads
    EXPECT_LT(sum_error(x.reshape({100000, 10}), {0}), 1e-5);    // ten long columns
    EXPECT_LT(sum_error(x.reshape({2000, 500}), {0}), 1e-5);     // columns split over threads
    EXPECT_LT(sum_error(x.reshape({50, 2000, 10}), {1}), 1e-5);  // middle axis
  }
  // mean is the sum scaled.
  EXPECT_NEAR(mean(tenths).item(), 0.1, 1e-6);
}

// Up to a chunk (256 along a row or down a column) the sum is one SIMD pass, as before: a
// float32 sum of short rows and columns equals the float32 pass it always was, bit for bit, so
// training steps that sum a batch's gradients did not change.
TEST(SumAccuracy, ShortRowsAndColumnsAreOnePass) {
  Generator gen(5);
  Tensor x = Tensor::uniform({256, 64}, -1, 1, DType::F32, Device::cpu(), &gen);
  std::vector<float> v = x.to_float_vector(), cols(64, 0.0f);
  for (int64_t r = 0; r < 256; ++r)
    for (int64_t c = 0; c < 64; ++c) cols[c] += v[r * 64 + c];
  EXPECT_EQ(sum(x, {0}).to_float_vector(), cols);
}

}  // namespace
}  // namespace freight
