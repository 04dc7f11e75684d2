// The CPU GEMM cuts some float products between the threads itself (backend/cpu/sgemm_split.h).
// These tests check which shapes are cut, and that a cut product equals a float64 reference on
// every element: the pieces' offsets into transposed and plain operands, uneven last pieces, and
// beta = 1 (the LSTM accumulates its weight gradients into C), for cuts of C and of the sum.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/sgemm_split.h"
#include "common/test_util.h"
#include "freight/freight.h"
#include "ops/kernels/blas.h"

namespace freight {
namespace {

using cpu::plan_sgemm;
using cpu::SgemmSplit;

TEST(SgemmSplit, PlansTheShapesOfATrainingStep) {
  // The MLP 784-512-256-10 at batch 64 on two threads.
  EXPECT_EQ(plan_sgemm(512, 784, 64, true, false, 2).split, SgemmSplit::Rows);  // dW, layer 1
  EXPECT_EQ(plan_sgemm(512, 784, 64, true, false, 2).parts, 2);
  EXPECT_EQ(plan_sgemm(256, 512, 64, true, false, 2).split, SgemmSplit::Rows);   // dW, layer 2
  EXPECT_EQ(plan_sgemm(64, 512, 784, false, true, 2).split, SgemmSplit::Cols);   // forward
  EXPECT_EQ(plan_sgemm(64, 512, 256, false, false, 2).split, SgemmSplit::Cols);  // dX, layer 2
  // OpenBLAS keeps: one thread, large products, a deep weight gradient, tiny products.
  EXPECT_EQ(plan_sgemm(512, 784, 64, true, false, 1).split, SgemmSplit::None);
  EXPECT_EQ(plan_sgemm(1024, 1024, 1024, false, false, 2).split, SgemmSplit::None);
  EXPECT_EQ(plan_sgemm(512, 784, 1024, true, false, 2).split, SgemmSplit::None);
  EXPECT_EQ(plan_sgemm(10, 256, 64, true, false, 2).split, SgemmSplit::None);
  EXPECT_EQ(plan_sgemm(64, 10, 256, false, true, 2).split, SgemmSplit::None);
  // mnist-cnn's 9216-to-128 forward at batch 64: the sum is cut, into stretches of at least
  // kMinSplitDepth terms; not under 16 rows nor at 2048 terms on 4 threads.
  EXPECT_EQ(plan_sgemm(64, 128, 9216, false, true, 2).split, SgemmSplit::Depth);
  EXPECT_EQ(plan_sgemm(64, 128, 9216, false, true, 2).parts, 2);
  EXPECT_EQ(plan_sgemm(64, 128, 2048, false, true, 4).parts, 2);
  EXPECT_EQ(plan_sgemm(8, 128, 9216, false, true, 2).split, SgemmSplit::None);
  EXPECT_EQ(plan_sgemm(64, 128, 1024, false, true, 2).split, SgemmSplit::None);
  // Every piece keeps at least kMinSplitRows rows or columns.
  EXPECT_EQ(plan_sgemm(300, 784, 64, true, false, 16).parts, 2);
  EXPECT_EQ(plan_sgemm(64, 2048, 512, false, true, 16).parts, 16);
}

struct Case {
  int64_t m, n, k;
  bool ta, tb;
  double beta;
};

TEST(SgemmSplit, CutProductsMatchAFloat64Reference) {
  const int saved = num_threads();
  set_num_threads(2);
  const std::vector<Case> cases = {
      {512, 784, 64, true, false, 0.0},    // rows, even pieces
      {300, 520, 64, true, false, 0.0},    // rows, uneven pieces (160 + 140)
      {300, 520, 64, true, false, 1.0},    // rows, accumulating
      {64, 520, 784, false, true, 0.0},    // columns of a transposed B, uneven
      {100, 300, 256, false, false, 0.0},  // columns of a plain B, uneven
      {100, 300, 256, false, false, 1.0},  // columns, accumulating
      {64, 128, 2500, false, true, 0.0},   // the sum, a transposed B, uneven (1264 + 1236)
      {40, 100, 2100, true, false, 1.0},   // the sum, a transposed A, accumulating
      {20, 200, 3000, false, false, 0.0},  // the sum, plain operands
      {100, 60, 2048, true, true, 1.0},    // the sum, both transposed, accumulating
  };
  Generator g(11);
  for (const Case& c : cases) {
    ASSERT_NE(plan_sgemm(c.m, c.n, c.k, c.ta, c.tb, 2).split, SgemmSplit::None)
        << c.m << "x" << c.n << "x" << c.k << " is no longer cut: pick a shape that is";
    Tensor a = Tensor::normal(c.ta ? Shape{c.k, c.m} : Shape{c.m, c.k}, 0, 1, DType::F32,
                              Device::cpu(), &g);
    Tensor b = Tensor::normal(c.tb ? Shape{c.n, c.k} : Shape{c.k, c.n}, 0, 1, DType::F32,
                              Device::cpu(), &g);
    Tensor c0 = Tensor::normal({c.m, c.n}, 0, 1, DType::F32, Device::cpu(), &g);
    Tensor out = c0.clone();
    if (c.beta == 0)  // poisoned: an element no piece writes stays NaN
      out.fill_(std::numeric_limits<double>::quiet_NaN());
    kernels::gemm(DeviceType::CPU, a, c.ta, b, c.tb, out, 1.0, c.beta);
    const std::vector<double> want =
        test::gemm_reference(c.m, c.n, c.k, c.ta, c.tb, 1.0, c.beta, a, b, c0);
    EXPECT_EQ(test::gemm_mismatches(c.k, 1.0, out, want), 0)
        << c.m << "x" << c.n << "x" << c.k << " ta " << c.ta << " tb " << c.tb << " beta "
        << c.beta;
  }
  set_num_threads(saved);
}

}  // namespace
}  // namespace freight
