// The non-finite scan behind the save guard and the warning of `freight eval`.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "freight/freight.h"
#include "training/finite.h"

namespace freight::detail {
namespace {

Tensor bf16(const std::vector<uint16_t>& bits) {
  Tensor t = Tensor::empty({int64_t(bits.size())}, DType::BF16);
  std::copy(bits.begin(), bits.end(), static_cast<uint16_t*>(t.data_ptr()));
  return t;
}

TEST(NonFinite, FindsNaNAndInfinitiesInFloatTensorsOnly) {
  std::vector<float> v{1, NAN, 2, INFINITY, -INFINITY};
  io::NamedTensors t{{"fine", Tensor::ones({4})},
                     {"bad", Tensor::from_vector(v, {5})},
                     {"ints", Tensor::from_vector(std::vector<int64_t>{1, 2}, {2})},
                     {"f64", Tensor::full({3}, NAN, DType::F64)},
                     {"bf16", bf16({0x3F80, 0x7F80, 0xFFC1})},  // 1, +inf, NaN
                     {"empty", Tensor::zeros({0})}};
  std::vector<NonFinite> found = non_finite_tensors(t);
  ASSERT_EQ(found.size(), 3u);
  EXPECT_EQ(found[0].name, "bad");
  EXPECT_EQ(found[0].count, 3);
  EXPECT_EQ(found[0].numel, 5);
  EXPECT_EQ(found[1].name, "f64");
  EXPECT_EQ(found[2].name, "bf16");
  EXPECT_EQ(describe_non_finite(found),
            "bad (3 of 5 values), f64 (all 3 values) and bf16 (2 of 3 values)");
  EXPECT_EQ(describe_non_finite(found, 1), "bad (3 of 5 values) and 2 more");
  EXPECT_EQ(describe_non_finite({found[1]}), "f64 (all 3 values)");
}

}  // namespace
}  // namespace freight::detail
