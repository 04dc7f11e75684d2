// argmax and the training metrics' accuracy follow torch.argmax: the first maximum wins a tie,
// and a NaN counts as larger than everything (the first NaN wins), along any axis and layout.
#include <gtest/gtest.h>

#include <limits>

#include "freight/freight.h"
#include "ops/kernels/metrics.h"

namespace freight {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Rows whose torch.argmax is {1, 2, 0, 1, 3}.
Tensor rows() {
  return Tensor::from_vector(std::vector<double>{1,    kNaN, 3,    kNaN,  //
                                                 2,    2,    kNaN, 1,     //
                                                 kNaN, 5,    5,    1,     //
                                                 1,    3,    3,    0,     //
                                                 -1,   -2,   -3,   4},
                             {5, 4});
}

TEST(Argmax, FirstMaximumAndFirstNaNAsPyTorch) {
  const std::vector<int64_t> want{1, 2, 0, 1, 3};
  for (DType t : {DType::F32, DType::F64}) {
    Tensor x = rows().to(t);
    EXPECT_EQ(argmax(x, 1).to_int_vector(), want) << dtype_name(t);
    // The same rows as columns: the reduced axis is the strided one.
    EXPECT_EQ(argmax(x.t().contiguous(), 0).to_int_vector(), want) << dtype_name(t);
  }
  // Integers have no NaN: ties only.
  Tensor ints = Tensor::from_vector(std::vector<int64_t>{3, 7, 7, 1, 0, 0}, {2, 3});
  EXPECT_EQ(argmax(ints, 1).to_int_vector(), (std::vector<int64_t>{1, 0}));
}

TEST(Argmax, TheMetricsCountHitsByTheSameRule) {
  Tensor out = rows().to(DType::F32);
  Tensor labels = Tensor::from_vector(std::vector<int64_t>{1, 2, 0, 1, 3}, {5});
  Tensor sums = Tensor::zeros({2}, DType::F64);
  kernels::accumulate_metrics(DeviceType::CPU, out, labels, Tensor::scalar(0.5, DType::F32), 1.0,
                              sums);
  EXPECT_EQ(sums.to_double_vector()[1], 5.0);
}

}  // namespace
}  // namespace freight
