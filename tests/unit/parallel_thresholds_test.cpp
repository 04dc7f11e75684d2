// The thread-split thresholds (freight/parallel_thresholds.h): bad values are refused; every
// kernel gives the same results split and on one thread (forced by thresholds of 0 and of more
// work than any test has), bit for bit where each output element is computed by one thread; and
// the GEMM's cap on OpenBLAS's team is undone after the call.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu/conv_cpu.h"
#include "common/test_util.h"
#include "freight/freight.h"
#include "freight/parallel_thresholds.h"

namespace freight {
namespace {

constexpr double kNever = 1e30;

// Restores the thresholds in force when a test ends.
class ParallelThresholdsTest : public ::testing::Test {
 protected:
  void SetUp() override { saved_ = parallel_thresholds(); }
  void TearDown() override { set_parallel_thresholds(saved_); }
  static ParallelThresholds always() {
    ParallelThresholds t;
    t.conv_macs_per_thread = 0;
    t.gemm_macs_per_thread = 0;
    t.elementwise_per_thread = 1;
    return t;
  }
  static ParallelThresholds never() {
    ParallelThresholds t;
    t.conv_macs_per_thread = kNever;
    t.gemm_macs_per_thread = kNever;
    t.elementwise_per_thread = int64_t(1) << 40;
    return t;
  }
  ParallelThresholds saved_;
};

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.data_ptr(), b.data_ptr(), size_t(a.numel()) * dtype_size(a.dtype())) == 0;
}

// A weight gradient summed in another order: each element is a float32 sum of N·OH·OW products,
// and its rounding error scales with the size of those sums, not with the element, so one that
// happens to cancel to near zero may differ by more than 1e-4 of itself (an AVX-512 EPYC showed
// 8.4e-5 on an element of -0.43 whose neighbours were in the hundreds). Every element is held to
// `rel` of the largest one; a lost or doubled partial sum misses by far more.
::testing::AssertionResult close_to_scale(const Tensor& actual, const Tensor& expected,
                                          double rel) {
  std::vector<double> e = expected.to_double_vector();
  double scale = 0;
  for (double v : e) scale = std::max(scale, std::fabs(v));
  const double diff = test::max_abs_diff(actual, expected), tol = rel * scale;
  if (actual.shape() == expected.shape() && diff <= tol) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "max |difference| " << diff << " > " << rel << " x the largest |element| " << scale;
}

TEST_F(ParallelThresholdsTest, BadValuesAreRefusedNamingThem) {
  ParallelThresholds t;
  t.conv_macs_per_thread = -1;
  try {
    set_parallel_thresholds(t);
    FAIL() << "a negative threshold was taken";
  } catch (const Error& e) {
    EXPECT_TRUE(test::has(e.what(), "conv -1")) << e.what();
  }
  t = ParallelThresholds{};
  t.gemm_macs_per_thread = std::numeric_limits<double>::quiet_NaN();
  EXPECT_THROW(set_parallel_thresholds(t), Error);
  t = ParallelThresholds{};
  t.elementwise_per_thread = 0;
  EXPECT_THROW(set_parallel_thresholds(t), Error);
  EXPECT_EQ(parallel_thresholds(), saved_);  // nothing taken from a refused call
}

TEST_F(ParallelThresholdsTest, DescribeNamesEveryThreshold) {
  ParallelThresholds t;
  t.conv_macs_per_thread = 2.5e6;
  t.gemm_macs_per_thread = 131072;
  t.elementwise_per_thread = 16384;
  EXPECT_EQ(t.describe(),
            "conv 2.5M MACs, GEMM 131k MACs, elementwise 16384 elements (per thread)");
  t.gemm_macs_per_thread = 0;
  EXPECT_TRUE(test::has(t.describe(), "GEMM OpenBLAS's rule")) << t.describe();
}

// A convolution's forward and both gradients, split wherever the engines can and on one thread.
struct ConvResults {
  Tensor y, dx, dw, db;
};
ConvResults conv_step(const Tensor& x0, const Tensor& w0, const Tensor& b0, const Tensor& gy,
                      Pair stride) {
  Tensor x = x0.clone(), w = w0.clone(), b = b0.clone();
  x.set_requires_grad(), w.set_requires_grad(), b.set_requires_grad();
  Tensor y = conv2d(x, w, b, stride, {1, 1});
  y.backward(gy);
  return {y.detach(), x.grad(), w.grad(), b.grad()};
}

TEST_F(ParallelThresholdsTest, ConvolutionsAgreeSplitAndOnOneThread) {
  if (num_threads() < 2) GTEST_SKIP() << "one thread: nothing splits";
  Generator gen(7);
  // Batches of 1 (the engines that split over images split rows, tiles or taps of one image
  // instead), 2, 3 and 5 images; stride 1 and 2; 8 output channels (implicit engine, panels)
  // and 40 (direct engine).
  const std::pair<int64_t, int64_t> channels[] = {{5, 8}, {36, 40}};  // (in, out)
  for (auto [c, o] : channels)
    for (int64_t n : {1, 2, 3, 5})
      for (int64_t s : {1, 2}) {
        SCOPED_TRACE(testing::Message() << "batch " << n << ", stride " << s << ", " << c << " -> "
                                        << o << " channels");
        Tensor x = Tensor::normal({n, c, 13, 11}, 0, 1, DType::F32, Device::cpu(), &gen);
        Tensor w = Tensor::normal({o, c, 3, 3}, 0, 0.2, DType::F32, Device::cpu(), &gen);
        Tensor b = Tensor::normal({o}, 0, 1, DType::F32, Device::cpu(), &gen);
        const int64_t oh = (13 + 2 - 3) / s + 1, ow = (11 + 2 - 3) / s + 1;
        Tensor gy = Tensor::normal({n, o, oh, ow}, 0, 1, DType::F32, Device::cpu(), &gen);
        set_parallel_thresholds(always());
        ConvResults split = conv_step(x, w, b, gy, {s, s});
        set_parallel_thresholds(never());
        ConvResults one = conv_step(x, w, b, gy, {s, s});
        // Each output element of y and dx comes from one thread; dW and db add the threads'
        // partial sums in another order, except at batch 1, where the threads split the taps of
        // dW (stride 1, the direct engine) and each sums all pixels, and where oneDNN runs it.
        // (Without either, on the built-in kernels with FREIGHT_CONV_DNNL=0, im2col + BLAS adds
        // per-thread partial sums at batch 1 too.)
        EXPECT_TRUE(same_bits(split.y, one.y));
        EXPECT_TRUE(same_bits(split.dx, one.dx));
        const bool blas_dw = !cpu::conv_has_tile_engines() && !cpu::conv_dnnl_allowed();
        if (n == 1 && s == 1 && o >= 16 && !blas_dw) {
          EXPECT_TRUE(same_bits(split.dw, one.dw));
        }
        EXPECT_TRUE(close_to_scale(split.dw, one.dw, 1e-5));
        EXPECT_TRUE(test::all_close(split.db, one.db, 1e-5, 1e-5));
      }
}

// im2col + BLAS (what the avx2 kernels run where oneDNN does not) forced on every pass: its
// forward and input gradient give the same bits split and on one thread, on images that fit a
// chunk several times over (whole images per chunk) and on an image larger than a chunk (chunks
// of one image's pixels, which the forward's threads share at batch 1).
TEST_F(ParallelThresholdsTest, BlasEngineAgreesSplitAndOnOneThread) {
  if (num_threads() < 2) GTEST_SKIP() << "one thread: nothing splits";
  struct EngineScope {
    EngineScope() { cpu::set_conv_engine(cpu::ConvEngine::Blas); }
    ~EngineScope() { cpu::set_conv_engine(cpu::ConvEngine::Auto); }
  } blas;
  Generator gen(11);
  for (int64_t side : {13, 96})
    for (int64_t n : {1, 2, 3}) {
      SCOPED_TRACE(testing::Message() << "batch " << n << ", " << side << "x" << side);
      Tensor x = Tensor::normal({n, 5, side, side}, 0, 1, DType::F32, Device::cpu(), &gen);
      Tensor w = Tensor::normal({8, 5, 3, 3}, 0, 0.2, DType::F32, Device::cpu(), &gen);
      Tensor b = Tensor::normal({8}, 0, 1, DType::F32, Device::cpu(), &gen);
      Tensor gy = Tensor::normal({n, 8, side, side}, 0, 1, DType::F32, Device::cpu(), &gen);
      const int64_t before = cpu::conv_engine_runs(0, cpu::ConvEngine::Blas);
      set_parallel_thresholds(always());
      ConvResults split = conv_step(x, w, b, gy, {1, 1});
      set_parallel_thresholds(never());
      ConvResults one = conv_step(x, w, b, gy, {1, 1});
      EXPECT_GT(cpu::conv_engine_runs(0, cpu::ConvEngine::Blas), before);
      EXPECT_TRUE(same_bits(split.y, one.y));
      EXPECT_TRUE(same_bits(split.dx, one.dx));
      EXPECT_TRUE(close_to_scale(split.dw, one.dw, 1e-5));
    }
}

TEST_F(ParallelThresholdsTest, ElementwiseIsBitIdenticalSplitAndOnOneThread) {
  if (num_threads() < 2) GTEST_SKIP() << "one thread: nothing splits";
  Generator gen(3);
  Tensor a = Tensor::normal({1000, 37}, 0, 1, DType::F32, Device::cpu(), &gen);
  Tensor b = Tensor::normal({1000, 37}, 0, 1, DType::F32, Device::cpu(), &gen);
  set_parallel_thresholds(always());
  Tensor s1 = relu(add(a, b)), m1 = softmax(a, 1);
  set_parallel_thresholds(never());
  Tensor s2 = relu(add(a, b)), m2 = softmax(a, 1);
  EXPECT_TRUE(same_bits(s1, s2));
  EXPECT_TRUE(same_bits(m1, m2));
}

TEST_F(ParallelThresholdsTest, GemmCapIsUndoneAfterTheCall) {
  if (num_threads() < 2) GTEST_SKIP() << "one thread: no team to cap";
  const int threads = num_threads();
  Generator gen(5);
  Tensor a = Tensor::normal({64, 300}, 0, 1, DType::F32, Device::cpu(), &gen);
  Tensor b = Tensor::normal({300, 200}, 0, 1, DType::F32, Device::cpu(), &gen);
  set_parallel_thresholds(never());
  Tensor capped = matmul(a, b);  // one thread
  EXPECT_EQ(omp_get_max_threads(), threads);
  EXPECT_EQ(num_threads(), threads);
  set_parallel_thresholds(always());
  Tensor team = matmul(a, b);
  EXPECT_TRUE(test::all_close(capped, team, 1e-5, 1e-5));
  // The float64 product against the float32 one: the cap covers both.
  set_parallel_thresholds(never());
  Tensor d = matmul(a.to(DType::F64), b.to(DType::F64));
  EXPECT_EQ(omp_get_max_threads(), threads);
  EXPECT_TRUE(test::all_close(d.to(DType::F32), team, 1e-4, 1e-4));
}

}  // namespace
}  // namespace freight
