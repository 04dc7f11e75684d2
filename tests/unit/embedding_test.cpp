// embedding: gathers rows, scatter-adds gradients for repeated indices, rejects bad indices.
#include <gtest/gtest.h>

#include "common/test_util.h"
#include "freight/freight.h"

namespace freight {
namespace {

using test::error_of;
using test::has;

TEST(Embedding, GathersRowsAndAccumulatesRepeatedIndices) {
  // Table rows r = (10r, 10r + 1).
  Tensor w = Tensor::from_vector(std::vector<float>{0, 1, 10, 11, 20, 21}, {3, 2});
  w.set_requires_grad();
  Tensor idx = Tensor::from_vector(std::vector<int64_t>{2, 0, 2, 2}, {2, 2});
  Tensor out = embedding(idx, w);
  EXPECT_EQ(out.shape(), (Shape{2, 2, 2}));
  EXPECT_EQ(out.to_float_vector(), (std::vector<float>{20, 21, 0, 1, 20, 21, 20, 21}));
  // Output gradient k at lookup k (both columns): row 2 gets 1 + 3 + 4, row 0 gets 2, row 1 0.
  Tensor g = Tensor::from_vector(std::vector<float>{1, 1, 2, 2, 3, 3, 4, 4}, {2, 2, 2});
  out.backward(g);
  EXPECT_EQ(w.grad().to_float_vector(), (std::vector<float>{2, 2, 0, 0, 8, 8}));
}

TEST(Embedding, IndexOutOfRangeNamesIndexAndTableSize) {
  Tensor w = Tensor::zeros({4, 3});
  std::string m = error_of([&] {
    (void)embedding(Tensor::from_vector(std::vector<int64_t>{1, 7, 0}, {3}), w);
  });
  EXPECT_TRUE(has(m, "embedding")) << m;
  EXPECT_TRUE(has(m, "index 7")) << m;
  EXPECT_TRUE(has(m, "position 1")) << m;
  EXPECT_TRUE(has(m, "4 rows")) << m;
  m = error_of([&] { (void)embedding(Tensor::from_vector(std::vector<int64_t>{-2}, {1}), w); });
  EXPECT_TRUE(has(m, "embedding") && has(m, "index -2")) << m;
}

TEST(Embedding, BadOperandsNameTheOp) {
  Tensor idx = Tensor::from_vector(std::vector<int64_t>{0}, {1});
  std::string m = error_of([&] { (void)embedding(idx, Tensor::zeros({4})); });
  EXPECT_TRUE(has(m, "embedding") && has(m, "[4]")) << m;
  m = error_of([&] { (void)embedding(Tensor::zeros({1}), Tensor::zeros({4, 2})); });
  EXPECT_TRUE(has(m, "embedding") && has(m, "int64")) << m;
}

}  // namespace
}  // namespace freight
