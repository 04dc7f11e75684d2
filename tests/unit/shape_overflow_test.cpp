// Element and byte counts of shapes are checked products: shapes from files ([2^32, 2^32] in a
// checkpoint header) used to overflow int64 in shape_numel (undefined behaviour, caught by UBSan)
// and wrap to 0, so a tensor claimed 2^64 elements over an empty allocation.
#include <gtest/gtest.h>

#include "common/test_util.h"
#include "freight/freight.h"

namespace freight {
namespace {

using test::error_of;
using test::has;

TEST(ShapeOverflow, NumelAndStridesAreChecked) {
  const int64_t big = int64_t(1) << 32;
  EXPECT_EQ(shape_numel({3, 4}), 12);
  EXPECT_EQ(shape_numel({}), 1);
  EXPECT_EQ(shape_numel({0, big, big}), 0) << "a zero dimension makes any shape empty";
  EXPECT_EQ(shape_numel({big, big, 0}), 0);
  EXPECT_EQ(shape_numel({int64_t(1) << 62, 1}), int64_t(1) << 62);
  EXPECT_TRUE(has(error_of([&] { shape_numel({big, big}); }), "[4294967296, 4294967296]"));
  EXPECT_TRUE(has(error_of([&] { shape_numel({int64_t(1) << 62, 2}); }), "64-bit"));
  EXPECT_TRUE(has(error_of([&] { contiguous_strides({2, big, big}); }), "64-bit"));
}

TEST(ShapeOverflow, TensorsWhoseBytesDoNotFitAreRefused) {
  // 2^62 elements fit in int64, their 2^64 bytes as float32 do not.
  std::string m = error_of([] { Tensor::empty({int64_t(1) << 62}, DType::F32); });
  EXPECT_TRUE(has(m, "[4611686018427387904]")) << m;
  EXPECT_TRUE(has(m, "bytes")) << m;
  EXPECT_FALSE(error_of([] { Tensor::empty({int64_t(1) << 32, int64_t(1) << 32}); }).empty());
  EXPECT_EQ(Tensor::empty({0, int64_t(1) << 40}).numel(), 0);
}

}  // namespace
}  // namespace freight
