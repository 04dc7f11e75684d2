// conv2d beyond the op table: every CPU engine (im2col + BLAS, the panel, implicit and direct
// register tiles, oneDNN where it is built) against a direct reference on shapes that reach their
// edge cases (several chunks per thread, partial tiles, output channels not a multiple of the tile,
// strides, dilation), in float64 and float32; and the error messages.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "backend/cpu/conv_cpu.h"
#include "backend/cpu/conv_dnnl.h"
#include "common/test_util.h"
#include "freight/freight.h"
#include "ops/kernels/conv.h"

namespace freight {
namespace {

struct Geo {
  int64_t n, c, h, w, o, kh, kw;
  Pair stride, padding, dilation;
};

std::string describe(const Geo& g) {
  return fmt::format(
      "x [{}, {}, {}, {}] w [{}, {}, {}, {}] stride ({}, {}) pad ({}, {}) dil ({}, {})", g.n, g.c,
      g.h, g.w, g.o, g.c, g.kh, g.kw, g.stride[0], g.stride[1], g.padding[0], g.padding[1],
      g.dilation[0], g.dilation[1]);
}

// Direct sums in double: y, and for a given gy the gradients dx, dw, db.
struct Reference {
  std::vector<double> y, dx, dw, db;
};
Reference reference(const Geo& g, const std::vector<double>& x, const std::vector<double>& w,
                    const std::vector<double>& b, const std::vector<double>& gy) {
  int64_t oh = (g.h + 2 * g.padding[0] - g.dilation[0] * (g.kh - 1) - 1) / g.stride[0] + 1;
  int64_t ow = (g.w + 2 * g.padding[1] - g.dilation[1] * (g.kw - 1) - 1) / g.stride[1] + 1;
  Reference r;
  r.y.assign(g.n * g.o * oh * ow, 0.0);
  r.dx.assign(x.size(), 0.0);
  r.dw.assign(w.size(), 0.0);
  r.db.assign(g.o, 0.0);
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t o = 0; o < g.o; ++o)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          int64_t yi = ((n * g.o + o) * oh + i) * ow + j;
          double acc = b[o], gv = gy[yi];
          r.db[o] += gv;
          for (int64_t c = 0; c < g.c; ++c)
            for (int64_t p = 0; p < g.kh; ++p)
              for (int64_t q = 0; q < g.kw; ++q) {
                int64_t ih = i * g.stride[0] - g.padding[0] + p * g.dilation[0];
                int64_t iw = j * g.stride[1] - g.padding[1] + q * g.dilation[1];
                if (ih < 0 || ih >= g.h || iw < 0 || iw >= g.w) continue;
                int64_t xi = ((n * g.c + c) * g.h + ih) * g.w + iw;
                int64_t wi = ((o * g.c + c) * g.kh + p) * g.kw + q;
                acc += x[xi] * w[wi];
                r.dx[xi] += gv * w[wi];
                r.dw[wi] += gv * x[xi];
              }
          r.y[yi] = acc;
        }
  return r;
}

double rel_err(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i])) return std::numeric_limits<double>::infinity();
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

const std::vector<Geo>& geometries() {
  static const std::vector<Geo> g = {
      {3, 2, 9, 11, 10, 3, 3, {1, 1}, {1, 1}, {1, 1}},   // 10 outputs: a full and a partial tile
      {5, 3, 7, 7, 17, 2, 3, {1, 1}, {0, 1}, {1, 1}},    // non-square kernel, K = 18
      {4, 1, 28, 28, 6, 5, 5, {1, 1}, {2, 2}, {1, 1}},   // LeNet's first layer
      {3, 6, 14, 14, 16, 5, 5, {1, 1}, {0, 0}, {1, 1}},  // LeNet's second layer
      {2, 64, 32, 32, 9, 3, 3, {1, 1}, {1, 1}, {1, 1}},  // unrolled patches beyond one chunk
      {4, 5, 10, 9, 7, 3, 3, {2, 2}, {1, 1}, {1, 1}},    // stride 2
      {3, 4, 11, 10, 5, 3, 2, {2, 3}, {1, 0}, {2, 1}},   // mixed strides, dilation
      {2, 3, 12, 12, 4, 3, 3, {1, 1}, {2, 2}, {2, 2}},   // dilation with stride 1
      {6, 8, 6, 6, 12, 1, 1, {2, 2}, {0, 0}, {1, 1}},    // ResNet shortcut: 1x1, stride 2
      {3, 8, 5, 7, 9, 1, 1, {1, 1}, {0, 0}, {1, 1}},     // pointwise
      {2, 3, 4, 4, 5, 1, 1, {1, 1}, {1, 1}, {1, 1}},     // 1x1 with padding (negative pad' for dx)
      {1, 3, 8, 8, 4, 3, 3, {1, 1}, {1, 1}, {1, 1}},     // a single image
      {9, 2, 3, 3, 3, 3, 3, {1, 1}, {0, 0}, {1, 1}},     // one output pixel per image
      {2, 3, 10, 9, 40, 3, 3, {2, 2}, {1, 1}, {1, 1}},   // 40 outputs: 3 vectors, stride 2
      {2, 4, 7, 12, 70, 3, 3, {1, 1}, {1, 1}, {1, 1}},   // 70 outputs: more than 4 vectors
      {2, 3, 5, 6, 20, 3, 3, {1, 1}, {3, 2}, {1, 1}},    // rows on padding alone: the bias
      {2, 2, 7, 6, 17, 3, 3, {2, 1}, {3, 1}, {2, 1}},    // dilated rows half on the padding
      // Winograd's (whole 16-channel vectors, 3x3, stride 1): planes that are not whole 4x4
      // output blocks, with and without padding, and a batch Auto sends there
      {3, 32, 9, 10, 48, 3, 3, {1, 1}, {1, 1}, {1, 1}},
      {8, 32, 7, 6, 32, 3, 3, {1, 1}, {0, 0}, {1, 1}},
      // Freight's Winograd F(2x2, 3x3): odd planes (a last tile half outside), padding 2 (a
      // whole tile row on zeros; its input gradient pads 0), blocks of tile rows across images
      {5, 3, 5, 7, 6, 3, 3, {1, 1}, {2, 2}, {1, 1}},
      {40, 6, 4, 4, 5, 3, 3, {1, 1}, {1, 0}, {1, 1}},
  };
  return g;
}

class ConvEngines : public ::testing::TestWithParam<cpu::ConvEngine> {
 protected:
  void SetUp() override {
    const bool onednn =
        GetParam() == cpu::ConvEngine::Dnnl || GetParam() == cpu::ConvEngine::Winograd;
    if (onednn && !cpu::dnnl_conv_built()) GTEST_SKIP() << cpu::dnnl_conv_version();
    if (GetParam() == cpu::ConvEngine::Winograd && !cpu::dnnl_winograd_runs())
      GTEST_SKIP() << "oneDNN has no Winograd kernels on this CPU (they need AVX-512)";
    // Freight's tile engines are AVX2 and AVX-512 code: with the built-in baseline kernels
    // forcing one is an error, which ConvEngineChoice checks.
    const bool tile_engine =
        GetParam() == cpu::ConvEngine::Panel || GetParam() == cpu::ConvEngine::Implicit ||
        GetParam() == cpu::ConvEngine::Direct || GetParam() == cpu::ConvEngine::WinogradF2;
    if (tile_engine && !cpu::conv_has_tile_engines())
      GTEST_SKIP() << "the " << cpu_kernel_isa() << " CPU kernels have no tile engines";
    set_poison_allocations(true);
    cpu::set_conv_engine(GetParam());
  }
  void TearDown() override {
    cpu::set_conv_engine(cpu::ConvEngine::Auto);
    set_poison_allocations(false);
  }

  void check(DType dtype, double tol) {
    int64_t before[3];
    for (int pass = 0; pass < 3; ++pass) before[pass] = cpu::conv_engine_runs(pass, GetParam());
    for (const Geo& g : geometries()) {
      Generator gen(5);
      Tensor x = Tensor::normal({g.n, g.c, g.h, g.w}, 0, 1, DType::F64, Device::cpu(), &gen);
      Tensor w = Tensor::normal({g.o, g.c, g.kh, g.kw}, 0, 1, DType::F64, Device::cpu(), &gen);
      Tensor b = Tensor::normal({g.o}, 0, 1, DType::F64, Device::cpu(), &gen);
      Tensor xt = x.to(dtype).set_requires_grad(), wt = w.to(dtype).set_requires_grad();
      Tensor bt = b.to(dtype).set_requires_grad();
      Tensor y = conv2d(xt, wt, bt, g.stride, g.padding, g.dilation);
      Tensor gy = Tensor::normal(y.shape(), 0, 1, DType::F64, Device::cpu(), &gen);
      y.backward(gy.to(dtype));
      Reference r = reference(g, x.to_double_vector(), w.to_double_vector(), b.to_double_vector(),
                              gy.to_double_vector());
      EXPECT_LT(rel_err(y.to_double_vector(), r.y), tol) << "y, " << describe(g);
      EXPECT_LT(rel_err(xt.grad().to_double_vector(), r.dx), tol) << "dx, " << describe(g);
      EXPECT_LT(rel_err(wt.grad().to_double_vector(), r.dw), tol) << "dw, " << describe(g);
      EXPECT_LT(rel_err(bt.grad().to_double_vector(), r.db), tol) << "db, " << describe(g);
    }
    // A forced engine must really have run each pass on some of the geometries (a dispatch
    // that fell through to another engine would pass the comparisons unnoticed). Forcing an
    // tile engine on kernels without one already failed in SetUp.
    // (oneDNN runs fp32 only: forced on float64, the passes run on Auto's engines.)
    const bool onednn =
        GetParam() == cpu::ConvEngine::Dnnl || GetParam() == cpu::ConvEngine::Winograd;
    const bool runs = GetParam() != cpu::ConvEngine::Auto && !(onednn && dtype != DType::F32);
    if (runs) {
      for (int pass = 0; pass < 3; ++pass)
        EXPECT_GT(cpu::conv_engine_runs(pass, GetParam()), before[pass]) << "pass " << pass;
    }
  }
};

// conv2d_relu on the forced engine against relu(conv2d(...)) on the same engine: the ReLU the
// engine applies as it writes must leave the outputs, and so the gradients, the pair's bit for
// bit, in both float types and on every geometry (each engine writes its outputs its own way:
// through a tile's store, an image or a chunk at a time, or after oneDNN's reorder). Without an
// input gradient (a first layer) the weight gradient reads the gradient through the mask itself.
TEST_P(ConvEngines, FusedReluIsTheUnfusedPairBitForBit) {
  int64_t before = cpu::conv_engine_runs(0, GetParam());
  for (DType dtype : {DType::F32, DType::F64})
    for (bool input_grad : {true, false})
      for (const Geo& g : geometries()) {
        SCOPED_TRACE(describe(g) + " " + dtype_name(dtype) +
                     (input_grad ? "" : ", no input gradient"));
        Generator gen(11);
        Tensor x = Tensor::normal({g.n, g.c, g.h, g.w}, 0, 1, dtype, Device::cpu(), &gen);
        Tensor w = Tensor::normal({g.o, g.c, g.kh, g.kw}, 0, 1, dtype, Device::cpu(), &gen);
        Tensor b = Tensor::normal({g.o}, 0, 1, dtype, Device::cpu(), &gen);
        std::vector<std::vector<double>> seen[2];
        for (int fused = 0; fused < 2; ++fused) {
          Tensor xt = x.detach().set_requires_grad(input_grad), wt = w.detach().set_requires_grad();
          Tensor bt = b.detach().set_requires_grad();
          Tensor y = fused ? conv2d_relu(xt, wt, bt, g.stride, g.padding, g.dilation)
                           : relu(conv2d(xt, wt, bt, g.stride, g.padding, g.dilation));
          Generator ggen(12);
          y.backward(Tensor::normal(y.shape(), 0, 1, dtype, Device::cpu(), &ggen));
          seen[fused] = {y.to_double_vector(),
                         input_grad ? xt.grad().to_double_vector() : std::vector<double>{},
                         wt.grad().to_double_vector(), bt.grad().to_double_vector()};
        }
        EXPECT_EQ(seen[1][0], seen[0][0]) << "y";
        EXPECT_EQ(seen[1][1], seen[0][1]) << "dx";
        EXPECT_EQ(seen[1][2], seen[0][2]) << "dw";
        EXPECT_EQ(seen[1][3], seen[0][3]) << "db";
        size_t zeros = 0;
        for (double v : seen[1][0]) zeros += v == 0;
        EXPECT_GT(zeros, 0u) << "the ReLU clamped nothing";
      }
  if (GetParam() != cpu::ConvEngine::Auto) {
    EXPECT_GT(cpu::conv_engine_runs(0, GetParam()), before) << "the forced engine never ran";
  }
}

TEST_P(ConvEngines, MatchDirectSumsFloat64) {
  check(DType::F64, 1e-12);
}
TEST_P(ConvEngines, MatchDirectSumsFloat32) {
  check(DType::F32, 1e-5);
}

std::string engine_name(const ::testing::TestParamInfo<cpu::ConvEngine>& info) {
  switch (info.param) {
    case cpu::ConvEngine::Auto:
      return "Auto";
    case cpu::ConvEngine::Blas:
      return "Blas";
    case cpu::ConvEngine::Panel:
      return "Panel";
    case cpu::ConvEngine::Implicit:
      return "Implicit";
    case cpu::ConvEngine::Direct:
      return "Direct";
    case cpu::ConvEngine::Dnnl:
      return "Dnnl";
    case cpu::ConvEngine::Winograd:
      return "Winograd";
    case cpu::ConvEngine::WinogradF2:
      return "WinogradF2";
  }
  return "Unknown";
}

INSTANTIATE_TEST_SUITE_P(Cpu, ConvEngines,
                         ::testing::Values(cpu::ConvEngine::Auto, cpu::ConvEngine::Blas,
                                           cpu::ConvEngine::Panel, cpu::ConvEngine::Implicit,
                                           cpu::ConvEngine::Direct, cpu::ConvEngine::Dnnl,
                                           cpu::ConvEngine::Winograd, cpu::ConvEngine::WinogradF2),
                         engine_name);

// The tile engines exist exactly when the loaded CPU kernels are the avx512 or avx2 ones; forcing
// one that the kernels lack is an error naming the engine and the level (never a silent run on
// Blas), and leaves the choice as it was. Run on each level (tests/CMakeLists.txt).
TEST(ConvEngineChoice, ForcingAnEngineTheKernelsLackIsAnError) {
  const bool tiles = cpu_kernel_isa() == "avx512" || cpu_kernel_isa() == "avx2";
  if (cpu_kernel_isa() != "built-in") {
    EXPECT_EQ(cpu::conv_has_tile_engines(), tiles);
  }
  for (cpu::ConvEngine e : {cpu::ConvEngine::Panel, cpu::ConvEngine::Implicit,
                            cpu::ConvEngine::Direct, cpu::ConvEngine::WinogradF2}) {
    if (cpu::conv_has_tile_engines()) {
      EXPECT_NO_THROW(cpu::set_conv_engine(e));
    } else {
      const std::string err = test::error_of([&] { cpu::set_conv_engine(e); });
      EXPECT_TRUE(test::has(err, "needs the avx2 or avx512 CPU kernels") &&
                  test::has(err, cpu_kernel_isa()))
          << err;
    }
  }
  cpu::set_conv_engine(cpu::ConvEngine::Auto);
  // Without the tile engines every pass of an automatic choice among Freight's own engines runs
  // on Blas.
  if (!cpu::conv_has_tile_engines()) {
    const bool dnnl = cpu::conv_dnnl_allowed();
    cpu::set_conv_dnnl_allowed(false);
    int64_t before[3];
    for (int pass = 0; pass < 3; ++pass)
      before[pass] = cpu::conv_engine_runs(pass, cpu::ConvEngine::Blas);
    Tensor x = Tensor::ones({2, 3, 8, 8}).set_requires_grad();
    Tensor w = Tensor::ones({16, 3, 3, 3}).set_requires_grad();
    sum(conv2d(x, w, Tensor(), {1, 1}, {1, 1}, {1, 1})).backward();
    for (int pass = 0; pass < 3; ++pass)
      EXPECT_GT(cpu::conv_engine_runs(pass, cpu::ConvEngine::Blas), before[pass])
          << "pass " << pass;
    cpu::set_conv_dnnl_allowed(dnnl);
  }
}

// Auto's forward of LeNet-5's second convolution (one vector of output channels, a fifth of the
// implicit tiles' work on padding columns) runs on oneDNN from batch 16, where it measured
// faster; at batch 1 it stays on Freight's engine.
TEST(Conv2d, AutoRunsLeNetsSecondForwardOnOneDnnFromBatchSixteen) {
  if (cpu_kernel_isa() != "avx512" || !cpu::conv_dnnl_allowed())
    GTEST_SKIP() << "a rule of the avx512 kernels with oneDNN";
  cpu::set_conv_engine(cpu::ConvEngine::Auto);
  Tensor w = Tensor::normal({16, 6, 5, 5});
  for (int64_t n : {1, 16, 64}) {
    const int64_t before = cpu::conv_engine_runs(0, cpu::ConvEngine::Dnnl);
    conv2d(Tensor::normal({n, 6, 14, 14}), w);
    EXPECT_EQ(cpu::conv_engine_runs(0, cpu::ConvEngine::Dnnl) - before, n >= 16 ? 1 : 0)
        << "batch " << n;
  }
}

// A convolution for Auto to place: batch, channels in, plane side, channels out, kernel side,
// stride (padding 1), and which passes the engine under test should take (bit p for pass p:
// forward, input gradient, weight gradient).
struct AutoCase {
  int64_t n, c, hw, o, k, stride;
  unsigned taken;
};
constexpr unsigned kNoPass = 0, kAllPasses = 7, kWeightGradOnly = 4;
// Runs each case's forward and backward under Auto and checks that `engine` ran exactly the
// passes of each case it should take, and none of the others.
void expect_auto_places(cpu::ConvEngine engine, std::initializer_list<AutoCase> cases) {
  cpu::set_conv_engine(cpu::ConvEngine::Auto);
  for (const AutoCase& c : cases) {
    SCOPED_TRACE(fmt::format("batch {}, {} -> {} channels, {}x{} planes, {}x{}, stride {}", c.n,
                             c.c, c.o, c.hw, c.hw, c.k, c.k, c.stride));
    Tensor x = Tensor::normal({c.n, c.c, c.hw, c.hw}).set_requires_grad();
    Tensor w = Tensor::normal({c.o, c.c, c.k, c.k}).set_requires_grad();
    int64_t before[3];
    for (int pass = 0; pass < 3; ++pass) before[pass] = cpu::conv_engine_runs(pass, engine);
    sum(conv2d(x, w, Tensor(), {c.stride, c.stride}, {1, 1}, {1, 1})).backward();
    for (int pass = 0; pass < 3; ++pass)
      EXPECT_EQ(cpu::conv_engine_runs(pass, engine) - before[pass], (c.taken >> pass) & 1)
          << "pass " << pass;
  }
}

// Auto runs every pass of a 3x3 stride-1 convolution with 32 or more input and output channels
// (whole 16-channel vectors) on oneDNN's Winograd kernels from batch 8, where they measured
// 1.2-2.2x the best other engine; at batch 1, with 16 channels, a 5x5 kernel or stride 2 it does
// not. Only where this CPU has oneDNN's Winograd (AVX-512).
TEST(Conv2d, AutoRunsWideThreeByThreeConvolutionsOnWinogradFromBatchEight) {
  if (cpu_kernel_isa() != "avx512" || !cpu::conv_dnnl_allowed() || !cpu::dnnl_winograd_runs())
    GTEST_SKIP() << "a rule of the avx512 kernels with oneDNN's Winograd";
  expect_auto_places(cpu::ConvEngine::Winograd, {{8, 32, 16, 32, 3, 1, kAllPasses},
                                                 {64, 64, 8, 64, 3, 1, kAllPasses},
                                                 {8, 32, 12, 64, 3, 1, kAllPasses},
                                                 {1, 32, 16, 32, 3, 1, kNoPass},
                                                 {8, 16, 16, 16, 3, 1, kNoPass},
                                                 {8, 32, 16, 16, 3, 1, kNoPass},
                                                 {8, 32, 16, 32, 5, 1, kNoPass},
                                                 {8, 32, 16, 32, 3, 2, kNoPass},
                                                 {8, 40, 16, 32, 3, 1, kNoPass}});
}

// With the avx2 kernels Auto runs a 3x3 stride-1 convolution with 16 or more input and output
// channels on Freight's Winograd F(2x2, 3x3): its weight gradient at any batch, its forward and
// input gradient where the batch has 2048 output pixels or more (not at batch 1, not on 64-channel
// 8x8 planes below batch 32); no pass of a 3-channel first layer, a layer of 8 output channels, a
// 5x5 kernel or stride 2.
TEST(Conv2d, AutoRunsThreeByThreeConvolutionsOnFreightsWinogradWithTheAvx2Kernels) {
  if (cpu_kernel_isa() != "avx2") GTEST_SKIP() << "a rule of the avx2 kernels";
  expect_auto_places(cpu::ConvEngine::WinogradF2, {{8, 16, 32, 16, 3, 1, kAllPasses},
                                                   {8, 32, 16, 32, 3, 1, kAllPasses},
                                                   {32, 64, 8, 64, 3, 1, kAllPasses},
                                                   {4, 32, 26, 64, 3, 1, kAllPasses},
                                                   {1, 32, 16, 32, 3, 1, kWeightGradOnly},
                                                   {8, 64, 8, 64, 3, 1, kWeightGradOnly},
                                                   {64, 3, 32, 16, 3, 1, kNoPass},
                                                   {8, 32, 16, 8, 3, 1, kNoPass},
                                                   {8, 32, 16, 32, 5, 1, kNoPass},
                                                   {64, 32, 16, 32, 3, 2, kNoPass}});
}

// Only the gradients that are asked for are computed, and the rest stay undefined.
// The direct engine streams an output of more than 8 MiB to memory with non-temporal stores of
// whole aligned vectors (the rest as before): planes of 1023 pixels leave most rows unaligned and
// 33 channels a partial vector, so every kind of store runs. Against the float64 sums, poisoned
// memory showing where nothing was written, and the fused ReLU the unfused pair's bit for bit.
TEST(Conv2d, DirectEngineStreamsAnOutputBeyondTheCaches) {
  if (!cpu::conv_has_tile_engines()) GTEST_SKIP() << "no tile engines in these CPU kernels";
  set_poison_allocations(true);
  cpu::set_conv_engine(cpu::ConvEngine::Direct);
  for (DType dtype : {DType::F32, DType::F64}) {
    const int64_t n = dtype == DType::F32 ? 68 : 35;  // 9.2 and 9.5 MB of output
    const Geo g{n, 2, 31, 33, 33, 3, 3, {1, 1}, {1, 1}, {1, 1}};
    SCOPED_TRACE(describe(g) + " " + dtype_name(dtype));
    Generator gen(21);
    Tensor x = Tensor::normal({g.n, g.c, g.h, g.w}, 0, 1, DType::F64, Device::cpu(), &gen);
    Tensor w = Tensor::normal({g.o, g.c, g.kh, g.kw}, 0, 1, DType::F64, Device::cpu(), &gen);
    Tensor b = Tensor::normal({g.o}, 0, 1, DType::F64, Device::cpu(), &gen);
    const int64_t runs = cpu::conv_engine_runs(0, cpu::ConvEngine::Direct);
    Tensor y = conv2d(x.to(dtype), w.to(dtype), b.to(dtype), g.stride, g.padding);
    EXPECT_GT(cpu::conv_engine_runs(0, cpu::ConvEngine::Direct), runs);
    ASSERT_GT(y.numel() * int64_t(dtype_size(dtype)), int64_t(8) << 20);
    Reference r = reference(g, x.to_double_vector(), w.to_double_vector(), b.to_double_vector(),
                            std::vector<double>(size_t(y.numel()), 0.0));
    EXPECT_LT(rel_err(y.to_double_vector(), r.y), dtype == DType::F32 ? 1e-6 : 1e-14);
    Tensor fused = conv2d_relu(x.to(dtype), w.to(dtype), b.to(dtype), g.stride, g.padding);
    EXPECT_EQ(fused.to_double_vector(), relu(y).to_double_vector());
  }
  cpu::set_conv_engine(cpu::ConvEngine::Auto);
  set_poison_allocations(false);
}

TEST(Conv2d, GradientsOnlyWhereRequired) {
  Tensor x = Tensor::normal({2, 3, 6, 6});
  Tensor w = Tensor::normal({4, 3, 3, 3}).set_requires_grad();
  Tensor b = Tensor::normal({4});
  sum(conv2d(x, w, b)).backward();
  EXPECT_FALSE(x.grad().defined());
  EXPECT_FALSE(b.grad().defined());
  ASSERT_TRUE(w.grad().defined());
  EXPECT_EQ(w.grad().shape(), w.shape());
}

// conv2d_workspace_bytes (what freight plan counts for a convolution) against what each pass
// really takes from the CPU allocator beyond its operands, on whichever engine runs it (im2col +
// BLAS, oneDNN, or a tile engine): exactly, up to the allocator's rounding. Zoo-like
// layers: a first layer, 16 and 64 channels, a strided one, a 1x1; in float32 and float64 (the
// tile engines size their chunks by the element).
TEST(Conv2d, WorkspaceBytesAreWhatEachPassTakes) {
  const Geo geos[] = {
      {8, 1, 28, 28, 32, 3, 3, {1, 1}, {0, 0}, {1, 1}},
      {8, 16, 32, 32, 16, 3, 3, {1, 1}, {1, 1}, {1, 1}},
      {4, 64, 8, 8, 64, 3, 3, {1, 1}, {1, 1}, {1, 1}},
      {4, 16, 32, 32, 32, 3, 3, {2, 2}, {1, 1}, {1, 1}},
      {4, 16, 32, 32, 32, 1, 1, {2, 2}, {0, 0}, {1, 1}},
      {16, 6, 14, 14, 16, 5, 5, {1, 1}, {0, 0}, {1, 1}},  // LeNet-5's second: oneDNN forward
  };
  const Device cpu = Device::cpu();
  std::vector<cpu::ConvEngine> engines{cpu::ConvEngine::Auto, cpu::ConvEngine::Blas};
  if (cpu::dnnl_conv_built()) engines.push_back(cpu::ConvEngine::Dnnl);
  if (cpu::conv_has_tile_engines())
    engines.insert(engines.end(), {cpu::ConvEngine::Panel, cpu::ConvEngine::Implicit,
                                   cpu::ConvEngine::Direct, cpu::ConvEngine::WinogradF2});
  for (cpu::ConvEngine engine : engines) {
    cpu::set_conv_engine(engine);
    for (const Geo& geo : geos) {
      const Conv2dGeometry g{geo.n,
                             geo.c,
                             geo.h,
                             geo.w,
                             geo.o,
                             geo.kh,
                             geo.kw,
                             0,
                             0,
                             geo.stride[0],
                             geo.stride[1],
                             geo.padding[0],
                             geo.padding[1],
                             geo.dilation[0],
                             geo.dilation[1]};
      Conv2dGeometry full = g;
      full.oh = (g.h + 2 * g.ph - g.dh * (g.kh - 1) - 1) / g.sh + 1;
      full.ow = (g.w + 2 * g.pw - g.dw * (g.kw - 1) - 1) / g.sw + 1;
      for (DType dt : {DType::F32, DType::F64}) {
        const auto normal = [&](const Shape& s) { return Tensor::normal(s, 0, 1, dt); };
        Tensor x = normal({g.n, g.c, g.h, g.w}), w = normal({g.o, g.c, g.kh, g.kw});
        Tensor b = normal({g.o}), gy = normal({g.n, g.o, full.oh, full.ow});
        Tensor y = Tensor::empty(gy.shape(), dt), dx = Tensor::empty(x.shape(), dt);
        Tensor dw = Tensor::empty(w.shape(), dt), db = Tensor::empty(b.shape(), dt);
        int64_t most = 0;
        for (int pass = 0; pass < 3; ++pass) {
          static const char* const kNames[] = {"auto",   "blas", "panel",    "implicit",
                                               "direct", "dnnl", "winograd", "winograd F2"};
          SCOPED_TRACE(fmt::format("engine {}, {}, {}, pass {}", kNames[int(engine)], describe(geo),
                                   dtype_name(dt), pass));
          const int64_t reported = kernels::conv2d_workspace_bytes(DeviceType::CPU, full, pass, dt);
          most = std::max(most, reported);
          // A first run builds oneDNN's primitive (none of the allocator's bytes), the second is
          // measured.
          for (int run = 0; run < 2; ++run) {
            const size_t before = memory_stats(cpu).in_use;
            reset_peak_memory(cpu);
            if (pass == 0) kernels::conv2d_forward(DeviceType::CPU, x, w, b, full, false, y);
            if (pass == 1) kernels::conv2d_backward_input(DeviceType::CPU, gy, w, full, dx);
            if (pass == 2)
              kernels::conv2d_backward_weight(DeviceType::CPU, gy, x, full, Tensor(), dw, db);
            const int64_t taken = int64_t(memory_stats(cpu).peak - before);
            if (run == 0) continue;
            // At most two allocations (a tile engine's input gradient flips the weights, then
            // runs a forward), each rounded up to 64 bytes or a page.
            EXPECT_LE(reported, taken);
            EXPECT_LT(taken - reported, 2 * 4096);
            EXPECT_GT(taken, 0);
          }
        }
        EXPECT_EQ(conv2d_workspace_bytes(x.shape(), w.shape(), geo.stride, geo.padding,
                                         geo.dilation, dt, cpu),
                  most);
      }
    }
  }
  cpu::set_conv_engine(cpu::ConvEngine::Auto);
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Conv2d, ErrorsNameTheOpAndShapes) {
  Tensor x = Tensor::zeros({2, 3, 8, 8});
  std::string m = error_of([&] { conv2d(x, Tensor::zeros({4, 2, 3, 3})); });
  EXPECT_NE(m.find("conv2d"), std::string::npos) << m;
  EXPECT_NE(m.find("[2, 3, 8, 8]"), std::string::npos) << m;
  EXPECT_NE(m.find("[4, 2, 3, 3]"), std::string::npos) << m;
  EXPECT_NE(m.find("channels"), std::string::npos) << m;

  m = error_of([&] { conv2d(x, Tensor::zeros({4, 3, 11, 3}), Tensor(), {1, 1}, {1, 1}); });
  EXPECT_NE(m.find("conv2d"), std::string::npos) << m;
  EXPECT_NE(m.find("larger than the padded input 10x10"), std::string::npos) << m;
  EXPECT_NE(m.find("[2, 3, 8, 8]"), std::string::npos) << m;

  m = error_of([&] { conv2d(x, Tensor::zeros({4, 3, 3, 3}), Tensor::zeros({3})); });
  EXPECT_NE(m.find("bias [3]"), std::string::npos) << m;

  m = error_of([&] { conv2d(Tensor::zeros({3, 8, 8}), Tensor::zeros({4, 3, 3, 3})); });
  EXPECT_NE(m.find("4-D"), std::string::npos) << m;

  m = error_of([&] { conv2d(x, Tensor::zeros({4, 3, 3, 3}), Tensor(), {0, 1}); });
  EXPECT_NE(m.find("stride"), std::string::npos) << m;

  m = error_of([&] { conv2d(x, Tensor::zeros({4, 3, 3, 3}, DType::F64)); });
  EXPECT_NE(m.find("conv2d"), std::string::npos) << m;
}

}  // namespace
}  // namespace freight
