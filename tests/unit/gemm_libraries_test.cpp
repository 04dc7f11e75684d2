// Float GEMMs run on oneDNN's sgemm or OpenBLAS's, per shape (backend/cpu/sgemm_onednn.h). These
// tests check the rule on the shapes of a training step, and that products routed to oneDNN (whole
// and as the pieces of a split) equal a float64 reference on every element for every
// transposition, alpha and beta, agree with OpenBLAS, and repeat bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/cpu/sgemm_onednn.h"
#include "backend/cpu/sgemm_split.h"
#include "common/test_util.h"
#include "freight/freight.h"
#include "ops/kernels/blas.h"

namespace freight {
namespace {

using cpu::onednn_sgemm_faster;

// The rule on the shapes of a step (B's row stride ldb is its width: n untransposed, k
// transposed), with each library's AVX-512 kernels (the Xeon it was measured on) and with
// neither (an AVX2 machine).
constexpr cpu::GemmKernels kXeon{true, true}, kAvx2{false, false};
bool faster(int64_t m, int64_t n, int64_t k, bool ta, bool tb, cpu::GemmKernels kernels) {
  return onednn_sgemm_faster(m, n, k, ta, tb, tb ? k : n, kernels);
}

TEST(GemmLibraries, RulePicksOneDnnForTheMiddleShapesOfAStep) {
  // mlp and fcn5 at batch 64 and 256: forward (NT), input gradient (NN), weight gradient (TN).
  EXPECT_TRUE(faster(64, 512, 784, false, true, kXeon));
  EXPECT_TRUE(faster(64, 784, 512, false, false, kXeon));
  EXPECT_TRUE(faster(512, 784, 64, true, false, kXeon));
  EXPECT_TRUE(faster(4096, 2048, 256, true, false, kXeon));
  // A batch of one against a large matrix.
  EXPECT_TRUE(faster(1, 4096, 2048, false, true, kXeon));
  // Tiny products stay on OpenBLAS's AVX-512 kernels, not on its Haswell ones.
  EXPECT_FALSE(faster(64, 10, 256, false, true, kXeon));
  EXPECT_TRUE(faster(64, 10, 256, false, true, kAvx2));
  // Weight gradients summed over 2048 rows or more stay on OpenBLAS.
  EXPECT_FALSE(faster(1024, 256, 2048, true, false, kXeon));
  EXPECT_FALSE(faster(10000, 256, 8192, true, false, kAvx2));
  EXPECT_TRUE(faster(512, 156, 1792, true, false, kXeon));
  // ... unless narrow, on oneDNN's AVX-512 sgemm: lstm-rows' over its steps at batch 256.
  EXPECT_TRUE(faster(512, 156, 7168, true, false, kXeon));
  EXPECT_FALSE(faster(512, 156, 7168, true, false, kAvx2));
  EXPECT_FALSE(faster(10000, 256, 8192, true, false, kXeon));
}

TEST(GemmLibraries, RuleSendsWideForwardsOnSeveralThreadsToOpenBlas) {
  // fcn5's forwards through its 2048- and 4096-wide inputs at batch 256, with either library's
  // kernels: OpenBLAS on two threads, oneDNN on one.
  for (cpu::GemmKernels kernels : {kXeon, kAvx2}) {
    EXPECT_FALSE(onednn_sgemm_faster(256, 4096, 2048, false, true, 2048, kernels, 2));
    EXPECT_FALSE(onednn_sgemm_faster(256, 1024, 4096, false, true, 4096, kernels, 2));
    EXPECT_TRUE(onednn_sgemm_faster(256, 4096, 2048, false, true, 2048, kernels, 1));
    // The column bands of a batch of 64 (each piece on one thread), a narrow layer (mnist-cnn's
    // 9216 to 128), a short one (an LSTM's 256 inputs) and the other transpositions stay.
    EXPECT_TRUE(onednn_sgemm_faster(64, 2048, 2048, false, true, 2048, kernels, 1));
    EXPECT_TRUE(onednn_sgemm_faster(256, 128, 9216, false, true, 9216, kernels, 2));
    EXPECT_TRUE(onednn_sgemm_faster(8192, 10000, 256, false, true, 256, kernels, 2));
    EXPECT_TRUE(onednn_sgemm_faster(256, 2048, 4096, false, false, 2056, kernels, 2));
  }
}

TEST(GemmLibraries, RuleRunsSmallBatchesThroughWideLayersTransposedOnOneDnnsAvx512Sgemm) {
  using cpu::transposed_forward_faster;
  // fcn5's two wide forwards at batch 64, smaller batches, a 1000-class classifier.
  EXPECT_TRUE(transposed_forward_faster(64, 4096, 2048, false, true, kXeon));
  EXPECT_TRUE(transposed_forward_faster(64, 1024, 4096, false, true, kXeon));
  EXPECT_TRUE(transposed_forward_faster(16, 4096, 2048, false, true, kXeon));
  EXPECT_TRUE(transposed_forward_faster(128, 1000, 1024, false, true, kXeon));
  // oneDNN's AVX2 sgemm keeps the NT call.
  EXPECT_FALSE(transposed_forward_faster(64, 4096, 2048, false, true, kAvx2));
  // A batch under 16 rows or over 128, few inputs, few outputs, other transpositions.
  EXPECT_FALSE(transposed_forward_faster(8, 4096, 2048, false, true, kXeon));
  EXPECT_FALSE(transposed_forward_faster(256, 4096, 2048, false, true, kXeon));
  EXPECT_FALSE(transposed_forward_faster(64, 10000, 256, false, true, kXeon));
  EXPECT_FALSE(transposed_forward_faster(64, 256, 4096, false, true, kXeon));
  EXPECT_FALSE(transposed_forward_faster(64, 2048, 4096, false, false, kXeon));
  EXPECT_FALSE(transposed_forward_faster(64, 2048, 4096, true, true, kXeon));
}

TEST(GemmLibraries, RuleKeepsAliasingRowStridesOffOneDnnsAvx2Sgemm) {
  // fcn5's dX = dY·W through its 2048- and 4096-wide inputs, mnist-cnn's 9216, mlp's 512: an
  // untransposed B whose rows are a multiple of 2 KiB apart.
  for (int64_t n : {512, 2048, 4096, 9216}) {
    EXPECT_FALSE(faster(64, n, 1024, false, false, kAvx2)) << n;
    EXPECT_FALSE(faster(128, n, 64, true, false, kAvx2)) << n;  // a narrow weight gradient (TN)
    EXPECT_TRUE(faster(64, n, 1024, false, false, kXeon)) << n;
    // A batch of one's dX, a wide layer's weight gradient (or its row band) and one summed over
    // a few rows stay on oneDNN.
    EXPECT_TRUE(faster(1, n, 1024, false, false, kAvx2)) << n;
    EXPECT_TRUE(faster(2048, n, 64, true, false, kAvx2)) << n;
    EXPECT_TRUE(faster(128, n, 16, true, false, kAvx2)) << n;
  }
  // Other widths, and a transposed B (the forward's NT) whatever its stride, stay on oneDNN.
  EXPECT_TRUE(faster(64, 784, 512, false, false, kAvx2));
  EXPECT_TRUE(faster(64, 256, 512, false, false, kAvx2));
  EXPECT_TRUE(faster(64, 4096, 2048, false, true, kAvx2));
  // A padded stride is what counts, not the width.
  EXPECT_TRUE(onednn_sgemm_faster(64, 4096, 1024, false, false, 4104, kAvx2));
  EXPECT_FALSE(onednn_sgemm_faster(64, 1000, 1024, false, false, 1024, kAvx2));
}

struct Case {
  int64_t m, n, k;
  bool ta, tb;
  double alpha, beta;
};

// Restores the thread count and oneDNN's permission when a test ends.
class GemmOnOneDnn : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cpu::onednn_sgemm_built()) GTEST_SKIP() << "built without oneDNN (libdnnl-dev)";
    threads_ = num_threads();
    allowed_ = cpu::gemm_dnnl_allowed();
    cpu::set_gemm_dnnl_allowed(true);
  }
  void TearDown() override {
    if (!cpu::onednn_sgemm_built()) return;
    set_num_threads(threads_);
    cpu::set_gemm_dnnl_allowed(allowed_);
  }
  int threads_ = 1;
  bool allowed_ = true;
};

TEST_F(GemmOnOneDnn, ProductsMatchAFloat64ReferenceAndOpenBlas) {
  std::vector<Case> cases = {
      {64, 520, 200, false, true, 1.0, 0.0},   // a layer's forward (split into columns)
      {64, 200, 520, false, false, 1.0, 0.0},  // its input gradient
      {300, 200, 64, true, false, 1.0, 0.0},   // its weight gradient (split into rows, uneven)
      {300, 200, 64, true, false, 1.0, 1.0},   // accumulated (an LSTM's)
      {1, 1000, 300, false, true, 1.0, 0.0},   // a batch of one
      {150, 170, 90, true, true, -0.5, 0.25},  // both transposed, scaled
      {700, 60, 40, false, false, 2.0, 1.0},   // tall and skinny (an LSTM's input projection)
  };
  if (cpu::gemm_kernels().onednn_avx512)  // a narrow weight gradient over many steps, accumulated
    cases.push_back({300, 150, 2100, true, false, 1.0, 1.0});
  Generator g(23);
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (const Case& c : cases) {
      SCOPED_TRACE(testing::Message()
                   << c.m << "x" << c.n << "x" << c.k << " ta " << c.ta << " tb " << c.tb
                   << " alpha " << c.alpha << " beta " << c.beta << ", " << threads << " threads");
      ASSERT_TRUE(cpu::use_onednn_sgemm(c.m, c.n, c.k, c.ta, c.tb, c.tb ? c.k : c.n))
          << "no longer routed to oneDNN: pick a shape that is";
      Tensor a = Tensor::normal(c.ta ? Shape{c.k, c.m} : Shape{c.m, c.k}, 0, 1, DType::F32,
                                Device::cpu(), &g);
      Tensor b = Tensor::normal(c.tb ? Shape{c.n, c.k} : Shape{c.k, c.n}, 0, 1, DType::F32,
                                Device::cpu(), &g);
      Tensor c0 = Tensor::normal({c.m, c.n}, 0, 1, DType::F32, Device::cpu(), &g);
      const std::vector<double> want =
          test::gemm_reference(c.m, c.n, c.k, c.ta, c.tb, c.alpha, c.beta, a, b, c0);
      auto run = [&](bool onednn) {
        cpu::set_gemm_dnnl_allowed(onednn);
        Tensor out = c0.clone();
        if (c.beta == 0)  // poisoned: an element nothing writes stays NaN
          out.fill_(std::numeric_limits<double>::quiet_NaN());
        kernels::gemm(DeviceType::CPU, a, c.ta, b, c.tb, out, c.alpha, c.beta);
        return out;
      };
      Tensor dnnl = run(true), again = run(true), blas = run(false);
      cpu::set_gemm_dnnl_allowed(true);
      EXPECT_EQ(test::gemm_mismatches(c.k, c.alpha, dnnl, want), 0);
      EXPECT_EQ(test::gemm_mismatches(c.k, c.alpha, blas, want), 0);
      EXPECT_EQ(std::memcmp(dnnl.data<float>(), again.data<float>(), size_t(c.m * c.n) * 4), 0)
          << "oneDNN's product differs between two runs";
    }
  }
}

TEST_F(GemmOnOneDnn, TransposedForwardsMatchAFloat64Reference) {
  if (!cpu::gemm_kernels().onednn_avx512) GTEST_SKIP() << "oneDNN runs its AVX2 sgemm here";
  // Batches and widths off the 16-float tiles of the copies, with and without a bias in C.
  const std::vector<Case> cases = {
      {64, 1024, 1040, false, true, 1.0, 0.0},
      {37, 1013, 1029, false, true, 1.0, 1.0},
      {16, 1000, 1100, false, true, -0.5, 0.25},
      {128, 1100, 1024, false, true, 2.0, 1.0},
  };
  Generator g(29);
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (const Case& c : cases) {
      SCOPED_TRACE(testing::Message() << c.m << "x" << c.n << "x" << c.k << " alpha " << c.alpha
                                      << " beta " << c.beta << ", " << threads << " threads");
      ASSERT_TRUE(cpu::use_transposed_forward(c.m, c.n, c.k, c.ta, c.tb))
          << "no longer run transposed: pick a shape that is";
      Tensor a = Tensor::normal({c.m, c.k}, 0, 1, DType::F32, Device::cpu(), &g);
      Tensor b = Tensor::normal({c.n, c.k}, 0, 1, DType::F32, Device::cpu(), &g);
      Tensor c0 = Tensor::normal({c.m, c.n}, 0, 1, DType::F32, Device::cpu(), &g);
      const std::vector<double> want =
          test::gemm_reference(c.m, c.n, c.k, c.ta, c.tb, c.alpha, c.beta, a, b, c0);
      auto run = [&] {
        Tensor out = c0.clone();
        if (c.beta == 0)  // poisoned: an element nothing writes stays NaN
          out.fill_(std::numeric_limits<double>::quiet_NaN());
        kernels::gemm(DeviceType::CPU, a, c.ta, b, c.tb, out, c.alpha, c.beta);
        return out;
      };
      Tensor once = run(), again = run();
      EXPECT_EQ(test::gemm_mismatches(c.k, c.alpha, once, want), 0);
      EXPECT_EQ(std::memcmp(once.data<float>(), again.data<float>(), size_t(c.m * c.n) * 4), 0)
          << "the transposed product differs between two runs";
    }
  }
}

TEST_F(GemmOnOneDnn, TurnedOffKeepsEveryProductOnOpenBlas) {
  cpu::set_gemm_dnnl_allowed(false);
  EXPECT_FALSE(cpu::use_onednn_sgemm(64, 512, 784, false, true, 784));
  EXPECT_TRUE(test::has(build_info(), "FREIGHT_GEMM_DNNL")) << build_info();
  cpu::set_gemm_dnnl_allowed(true);
  EXPECT_TRUE(cpu::use_onednn_sgemm(64, 512, 784, false, true, 784));
  EXPECT_FALSE(test::has(build_info(), "FREIGHT_GEMM_DNNL")) << build_info();
}

}  // namespace
}  // namespace freight
