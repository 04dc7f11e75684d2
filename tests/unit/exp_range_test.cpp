// The float32 exp op over float's whole range, against float64 libm: within 3e-7 relative
// where the result is a normal float, within FLT_MIN where it is subnormal (or flushed), inf
// above ln(FLT_MAX) and 0 far below, as torch.exp; NaN and ±inf as IEEE. The activations' clamped
// exponential (vec_math.h's vexp) once served the op too and gave exp(88.5) = 1.65e38 and a
// finite exp(100).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "freight/freight.h"

namespace freight {
namespace {

TEST(ExpRange, Float32ExpFollowsLibmOverTheWholeRange) {
  std::vector<float> xs;
  for (int i = -11000; i <= 9500; ++i) xs.push_back(float(i) * 0.01f);  // −110 .. 95
  for (float x : {88.72f, 88.7228f, 88.7229f, 88.73f, -87.33f, -103.97f, -104.0f, 1e-8f})
    xs.push_back(x);
  std::vector<double> in(xs.begin(), xs.end());
  Tensor y = exp(Tensor::from_vector(in, {int64_t(in.size())}).to(DType::F32));
  std::vector<double> got = y.to_double_vector();
  const double flt_min = std::numeric_limits<float>::min();
  const double flt_max = std::numeric_limits<float>::max();
  int bad = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const double want = std::exp(double(xs[i]));
    bool ok;
    if (want > flt_max * (1 + 1e-7))
      ok = std::isinf(got[i]) && got[i] > 0;
    else if (want < flt_min)
      ok = got[i] >= 0 && std::fabs(got[i] - want) <= flt_min;
    else
      ok = std::fabs(got[i] - want) <= 3e-7 * want;
    if (!ok && ++bad <= 5)
      ADD_FAILURE() << "exp(" << xs[i] << ") = " << got[i] << ", want " << want;
  }
  EXPECT_EQ(bad, 0);

  const float inf = std::numeric_limits<float>::infinity();
  std::vector<double> special =
      exp(Tensor::from_vector(std::vector<double>{inf, -inf, std::nan("")}, {3}).to(DType::F32))
          .to_double_vector();
  EXPECT_TRUE(std::isinf(special[0]) && special[0] > 0);
  EXPECT_EQ(special[1], 0.0);
  EXPECT_TRUE(std::isnan(special[2]));
}

}  // namespace
}  // namespace freight
