// Dropout and Embedding layers: training versus evaluation, reproducible masks, lookups.
#include <gtest/gtest.h>

#include <cmath>

#include "common/test_util.h"
#include "freight/freight.h"
#include "freight/nn/nn.h"

namespace freight {
namespace {

using namespace freight::nn;

TEST(NnDropout, DropoutFollowsTheTrainingFlag) {
  Dropout drop(0.5);
  Generator gen(123);
  drop.set_generator(&gen);
  Tensor x = Tensor::ones({4000});
  std::vector<float> y = drop(x).to_float_vector();
  int zeros = 0;
  for (float v : y) {
    EXPECT_TRUE(v == 0.0f || std::fabs(v - 2.0f) < 1e-6) << v;  // survivors scaled by 1/(1 − p)
    zeros += v == 0.0f;
  }
  EXPECT_NEAR(zeros / 4000.0, 0.5, 0.05);
  // The mask is a function of the generator's state: reseeding repeats it.
  gen.manual_seed(123);
  EXPECT_EQ(drop(x).to_float_vector(), y);
  drop.eval();
  EXPECT_EQ(drop(x).to_float_vector(), x.to_float_vector()) << "evaluation: the identity";
  EXPECT_EQ(drop.describe(), "Dropout(p=0.5)");
  EXPECT_THROW(Dropout(1.5), Error);
}

TEST(NnEmbedding, LookupShapesAndErrors) {
  manual_seed(6);
  Embedding emb(10, 3);
  Tensor idx = Tensor::from_vector(std::vector<int64_t>{1, 9, 1, 0}, {2, 2});
  Tensor e = emb(idx);
  EXPECT_EQ(e.shape(), (Shape{2, 2, 3}));
  EXPECT_EQ(emb.output_shape({2, 2}), (Shape{2, 2, 3}));
  EXPECT_TRUE(test::all_close(e.select(0, 0).select(0, 0), emb.weight().select(0, 1), 0, 0));
  EXPECT_TRUE(test::all_close(e.select(0, 1).select(0, 0), emb.weight().select(0, 1), 0, 0));
  EXPECT_THROW(emb(Tensor::zeros({2})), Error);  // float indices
}

}  // namespace
}  // namespace freight
