// CUDA backend: transfers of every dtype and of strided views, the caching allocator, the
// out-of-memory message, deferred label and index errors, the dropout mask against the CPU, and
// every kernel on odd sizes with NaN-poisoned allocations (an element a kernel forgets to write
// stays NaN and fails the comparison). Each test skips without a GPU, so this binary passes in
// CI and proves the backend on a GPU machine.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>

#include "common/test_util.h"
#include "freight/freight.h"

namespace freight::test {
namespace {

const Device kGpu = Device::cuda(0);
const int64_t kOddSizes[] = {1, 31, 1025, 65537};
const DType kAllDtypes[] = {DType::F32, DType::F64, DType::BF16, DType::I32, DType::I64, DType::U8};

// A CPU tensor of random bytes (any dtype, NaN patterns included: copies must keep them).
Tensor random_bytes(const Shape& shape, DType dtype, uint32_t seed) {
  Tensor t = Tensor::empty(shape, dtype, Device::cpu());
  auto* p = static_cast<unsigned char*>(t.data_ptr());
  std::mt19937 rng(seed);
  for (size_t i = 0; i < t.nbytes(); ++i) p[i] = static_cast<unsigned char>(rng());
  return t;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.is_contiguous() && b.is_contiguous() && a.nbytes() == b.nbytes() &&
         (a.nbytes() == 0 || std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0);
}

bool has_nan(const Tensor& t) {
  for (double v : t.to_double_vector())
    if (std::isnan(v)) return true;
  return false;
}

// ---------------------------------------------------------------- transfers
TEST(CudaBackend, RoundTripOfEveryDtypeIsBitExact) {
  FREIGHT_SKIP_WITHOUT_CUDA();
  for (DType dt : kAllDtypes) {
    for (int64_t n : {int64_t(0), int64_t(1), int64_t(31), int64_t(1025), int64_t(65537)}) {
      Tensor h = random_bytes({n}, dt, uint32_t(n + 17));
      Tensor d = h.to(kGpu);
      ASSERT_EQ(d.device(), kGpu);
      EXPECT_EQ(d.dtype(), dt);
      EXPECT_TRUE(same_bytes(h, d.to(Device::cpu()))) << dtype_name(dt) << " n = " << n;
      // Device-to-device packed copy too.
      EXPECT_TRUE(same_bytes(h, d.clone().to(Device::cpu()))) << dtype_name(dt) << " n = " << n;
    }
  }
}

TEST(CudaBackend, NonContiguousViewsMoveAndCopyCorrectly) {
  FREIGHT_SKIP_WITHOUT_CUDA();
  Generator gen(5);
  const std::vector<std::pair<const char*, std::function<Tensor(const Tensor&)>>> views = {
      {"transpose(0, 2)", [](const Tensor& t) { return t.transpose(0, 2); }},
      {"permute(1, 2, 0)",
       [](const Tensor& t) {
         return t.permute({1, 2, 0});
       }},
      {"slice(1, 1, 4)", [](const Tensor& t) { return t.slice(1, 1, 4); }},
      {"select(2, 3)", [](const Tensor& t) { return t.select(2, 3); }},
      {"transpose(1, 2).slice(0, 1, 3)",
       [](const Tensor& t) { return t.transpose(1, 2).slice(0, 1, 3); }},
  };
  for (DType dt : {DType::F32, DType::F64, DType::I32, DType::I64, DType::U8}) {
    Tensor h = Tensor::randint({4, 5, 6}, 0, 100, Device::cpu(), &gen).to(dt);
    Tensor d = h.to(kGpu);
    for (const auto& [name, view] : views) {
      Tensor hv = view(h), dv = view(d);
      ASSERT_FALSE(dv.is_contiguous()) << name;
      std::vector<double> want = hv.contiguous().to_double_vector();
      // Device view -> host (packed on the device by the strided copy kernel).
      EXPECT_EQ(dv.to(Device::cpu()).to_double_vector(), want) << dtype_name(dt) << " " << name;
      // Strided copy with a dtype conversion on the device.
      EXPECT_EQ(dv.to(DType::F64).to(Device::cpu()).to_double_vector(), want)
          << dtype_name(dt) << " " << name;
      // Host view -> strided device destination (copy_ into a view of a device tensor).
      Tensor dst = Tensor::zeros(d.shape(), dt, kGpu);
      Tensor dst_view = view(dst);
      dst_view.copy_(hv);
      EXPECT_EQ(view(dst.to(Device::cpu())).contiguous().to_double_vector(), want)
          << dtype_name(dt) << " " << name;
    }
  }
}

TEST(CudaBackend, Bfloat16TransposeIsBitExact) {
  FREIGHT_SKIP_WITHOUT_CUDA();
  // The CPU has no bfloat16 kernels yet, so the expected transpose is computed on raw bits.
  const int64_t rows = 37, cols = 29;
  Tensor h = random_bytes({rows, cols}, DType::BF16, 3);
  Tensor back = h.to(kGpu).t().contiguous().to(Device::cpu());
  ASSERT_EQ(back.shape(), (Shape{cols, rows}));
  const auto* src = static_cast<const uint16_t*>(h.data_ptr());
  const auto* got = static_cast<const uint16_t*>(back.data_ptr());
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j)
      ASSERT_EQ(got[j * rows + i], src[i * cols + j]) << "element (" << i << ", " << j << ")";
}

// ---------------------------------------------------------------- allocator
TEST(CudaBackend, CachingAllocatorServesASteadyLoopWithoutFreshAllocations) {
  FREIGHT_SKIP_WITHOUT_CUDA();
  Generator gen(9);
  Tensor w = Tensor::normal({64, 33}, 0, 1, DType::F32, kGpu, &gen);
  w.set_requires_grad(true);
  Tensor x = Tensor::normal({257, 33}, 0, 1, DType::F32, kGpu, &gen);
  auto step = [&] {
    Tensor loss = mean(relu(linear(x, w)));
    loss.backward();
    w.zero_grad();
    (void)loss.item();
  };
  step();  // the first step fills the cache
  MemoryStats before = memory_stats(kGpu);
  for (int i = 0; i < 20; ++i) step();
  MemoryStats after = memory_stats(kGpu);
  EXPECT_GT(after.allocs, before.allocs);
  EXPECT_EQ(after.fresh, before.fresh) << "a repeated step must be served from the cache";
  EXPECT_EQ(after.in_use, before.in_use);
}

TEST(CudaBackend, OutOfMemoryNamesTheBytesAskedAndFree) {
  FREIGHT_SKIP_WITHOUT_CUDA();
  try {
    Tensor t = Tensor::empty({int64_t(1) << 48}, DType::F32, kGpu);  // 1 PiB
    FAIL() << "expected an out-of-memory error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("out of memory"), std::string::npos) << m;
    EXPECT_NE(m.find("asked for 1.00 PiB"), std::string::npos) << m;
    EXPECT_NE(m.find("1125899906842624 bytes"), std::string::npos) << m;
    EXPECT_NE(m.find("free of"), std::string::npos) << m;
  }
  // The device is still usable.
  EXPECT_EQ(Tensor::ones({3}, DType::F32, kGpu).to_float_vector(),
            (std::vector<float>{1.0f, 1.0f, 1.0f}));
}

// ---------------------------------------------------------------- deferred errors
TEST(CudaBackend, BadLabelSurfacesAsAnErrorNamingCrossEntropy) {
  FREIGHT_SKIP_WITHOUT_CUDA();
  Generator gen(2);
  Tensor logits = Tensor::normal({4, 3}, 0, 1, DType::F32, kGpu, &gen);
  Tensor bad = Tensor::from_vector(std::vector<int64_t>{0, 7, 1, 2}, {4}, kGpu);
  Tensor loss = cross_entropy(logits, bad);  // queued; nothing waits for the GPU here
  try {
    (void)loss.item();
    FAIL() << "expected the bad label to be reported";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("cross_entropy"), std::string::npos) << m;
    EXPECT_NE(m.find("label 7"), std::string::npos) << m;
    EXPECT_NE(m.find("position 1"), std::string::npos) << m;
    EXPECT_NE(m.find("3 classes"), std::string::npos) << m;
  }
  // Reported once, then cleared: good labels work again and agree with the CPU.
  Tensor good = Tensor::from_vector(std::vector<int64_t>{0, 2, 1, 2}, {4}, kGpu);
  double got = cross_entropy(logits, good).item();
  double want = cross_entropy(logits.to(Device::cpu()), good.to(Device::cpu())).item();
  EXPECT_NEAR(got, want, 1e-5 * std::fabs(want));
  // An explicit synchronize reports it too; with several bad labels exactly one is named.
  Tensor several = Tensor::from_vector(std::vector<int64_t>{-1, 3, 1, 9}, {4}, kGpu);
  (void)cross_entropy(logits, several);
  try {
    synchronize(kGpu);
    FAIL() << "expected the bad labels to be reported";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("cross_entropy: label"), std::string::npos) << m;
  }
  EXPECT_NO_THROW(synchronize(kGpu));
}

TEST(CudaBackend, BadIndexSurfacesAsAnErrorNamingEmbedding) {
  FREIGHT_SKIP_WITHOUT_CUDA();
  Generator gen(4);
  Tensor table = Tensor::normal({5, 8}, 0, 1, DType::F32, kGpu, &gen);
  Tensor idx = Tensor::from_vector(std::vector<int64_t>{1, 4, 10, 0}, {2, 2}, kGpu);
  Tensor out = embedding(idx, table);
  try {
    (void)out.to(Device::cpu());
    FAIL() << "expected the bad index to be reported";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("embedding"), std::string::npos) << m;
    EXPECT_NE(m.find("index 10"), std::string::npos) << m;
    EXPECT_NE(m.find("position 2"), std::string::npos) << m;
    EXPECT_NE(m.find("5 rows"), std::string::npos) << m;
  }
  // Also with an empty embedding dimension, where nothing is copied but indices are checked.
  Tensor thin = Tensor::zeros({5, 0}, DType::F32, kGpu);
  (void)embedding(idx, thin);
  EXPECT_THROW(synchronize(kGpu), Error);
  EXPECT_NO_THROW(synchronize(kGpu));
}

// ---------------------------------------------------------------- dropout
TEST(CudaBackend, DropoutMaskIsBitIdenticalOnCpuAndCuda) {
  FREIGHT_SKIP_WITHOUT_CUDA();
  for (int64_t n : kOddSizes) {
    for (double p : {0.1, 0.5, 0.9}) {
      Generator data{uint64_t(n)};
      Tensor x = Tensor::normal({n}, 0, 1, DType::F32, Device::cpu(), &data);
      Tensor r = Tensor::normal({n}, 0, 1, DType::F32, Device::cpu(), &data);
      Generator a(1234), b(1234);
      a.reserve(5);  // start at a non-zero offset
      b.reserve(5);
      Tensor xc = x.detach();
      xc.set_requires_grad(true);
      Tensor xg = x.to(kGpu);
      xg.set_requires_grad(true);
      Tensor yc = dropout(xc, p, true, &a);
      Tensor yg = dropout(xg, p, true, &b);
      EXPECT_EQ(a.offset(), b.offset());
      EXPECT_EQ(yg.to_float_vector(), yc.to_float_vector()) << "n = " << n << ", p = " << p;
      sum(mul(yc, r)).backward();
      sum(mul(yg, r.to(kGpu))).backward();
      EXPECT_EQ(xg.grad().to_float_vector(), xc.grad().to_float_vector())
          << "n = " << n << ", p = " << p;
    }
  }
}

// A NaN or an infinity in x or in the gradient: both devices multiply by the mask's factor, so
// they agree element for element, NaN for NaN (a dropped infinity is NaN on both).
TEST(CudaBackend, DropoutTreatsNanAndInfinityAsTheCpu) {
  FREIGHT_SKIP_WITHOUT_CUDA();
  const int64_t n = 1001;
  Generator data(8);
  Tensor x = Tensor::normal({n}, 0, 1, DType::F32, Device::cpu(), &data);
  Tensor r = Tensor::normal({n}, 0, 1, DType::F32, Device::cpu(), &data);
  for (int64_t i = 0; i < n; i += 7) x.data<float>()[i] = i % 2 ? INFINITY : NAN;
  for (int64_t i = 3; i < n; i += 11) r.data<float>()[i] = NAN;
  Generator a(99), b(99);
  Tensor xc = x.detach(), xg = x.to(kGpu);
  xc.set_requires_grad(true);
  xg.set_requires_grad(true);
  Tensor yc = dropout(xc, 0.5, true, &a), yg = dropout(xg, 0.5, true, &b);
  sum(mul(yc, r)).backward();
  sum(mul(yg, r.to(kGpu))).backward();
  for (auto [got, want] : {std::pair{yg, yc}, {xg.grad(), xc.grad()}}) {
    std::vector<float> g = got.to_float_vector(), w = want.to_float_vector();
    int64_t nans = 0;
    for (int64_t i = 0; i < n; ++i) {
      nans += std::isnan(w[i]);
      if (std::isnan(w[i]))
        EXPECT_TRUE(std::isnan(g[i])) << "element " << i;
      else
        EXPECT_EQ(g[i], w[i]) << "element " << i;
    }
    EXPECT_GT(nans, n / 7 / 2);  // the NaNs, and the infinities dropped
  }
}

// ---------------------------------------------------------------- every kernel, odd sizes
class CudaPoisoned : public ::testing::Test {
 protected:
  void SetUp() override { set_poison_allocations(true); }
  void TearDown() override { set_poison_allocations(false); }
};

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

// Runs `f` on the CPU inputs and on copies on the GPU. The outputs must agree (relative error
// below 1e-4, exactly for integer outputs) and hold no NaN; when `grads` is set, so must the
// gradients of every floating input under L = Σ out ⊙ R for a random R.
void expect_matches_cpu(const std::string& what, const std::vector<Tensor>& inputs, const Fn& f,
                        bool grads = true) {
  SCOPED_TRACE(what);
  std::vector<Tensor> cpu, gpu;
  for (const Tensor& t : inputs) {
    Tensor c = t.detach(), g = t.to(kGpu);
    if (grads && is_floating(t.dtype())) {
      c.set_requires_grad(true);
      g.set_requires_grad(true);
    }
    cpu.push_back(c);
    gpu.push_back(g);
  }
  Tensor out_cpu = f(cpu), out_gpu = f(gpu);
  ASSERT_EQ(out_gpu.device(), kGpu);
  ASSERT_EQ(out_gpu.shape(), out_cpu.shape());
  if (!is_floating(out_cpu.dtype())) {
    EXPECT_EQ(out_gpu.to_int_vector(), out_cpu.to_int_vector());
    return;
  }
  EXPECT_FALSE(has_nan(out_gpu)) << "an output element was not written";
  EXPECT_LT(relative_error(out_gpu, out_cpu), 1e-4);
  if (!grads) return;
  Generator gen(77);
  Tensor r = Tensor::normal(out_cpu.shape(), 0, 1, out_cpu.dtype(), Device::cpu(), &gen);
  sum(mul(out_cpu, r)).backward();
  sum(mul(out_gpu, r.to(kGpu))).backward();
  for (size_t i = 0; i < cpu.size(); ++i) {
    if (!cpu[i].requires_grad()) continue;
    ASSERT_TRUE(gpu[i].grad().defined()) << "input " << i;
    EXPECT_FALSE(has_nan(gpu[i].grad()))
        << "a gradient element of input " << i << " was not written";
    EXPECT_LT(relative_error(gpu[i].grad(), cpu[i].grad()), 1e-4) << "gradient of input " << i;
  }
}

TEST_F(CudaPoisoned, ElementwiseKernelsWriteEveryElement) {
  FREIGHT_SKIP_WITHOUT_CUDA();
  for (int64_t n : kOddSizes) {
    SCOPED_TRACE("n = " + std::to_string(n));
    Generator gen{uint64_t(n) + 1};
    Tensor x = Tensor::uniform({n}, -1, 2, DType::F32, Device::cpu(), &gen);
    Tensor y = Tensor::uniform({n}, -1, 2, DType::F32, Device::cpu(), &gen);
    Tensor pos = Tensor::uniform({n}, 0.5, 2.5, DType::F32, Device::cpu(), &gen);
    Tensor row = Tensor::uniform({1, 3}, -1, 2, DType::F32, Device::cpu(), &gen);
    Tensor wide = Tensor::uniform({n, 3}, -1, 2, DType::F32, Device::cpu(), &gen);
    Tensor tall = Tensor::uniform({3, n}, -1, 2, DType::F32, Device::cpu(), &gen);
    auto two = [](Tensor (*op)(const Tensor&, const Tensor&)) {
      return Fn([op](const std::vector<Tensor>& v) { return op(v[0], v[1]); });
    };
    expect_matches_cpu("add", {x, y}, two(add));
    expect_matches_cpu("sub", {x, y}, two(sub));
    expect_matches_cpu("mul", {x, y}, two(mul));
    expect_matches_cpu("div", {x, pos}, two(div));
    expect_matches_cpu("add broadcast [n,1] + [1,3]", {x.reshape({n, 1}), row},
                       [](const std::vector<Tensor>& v) { return add(v[0], v[1]); });
    expect_matches_cpu("mul broadcast [3,1] * [1,n]", {row.reshape({3, 1}), x.reshape({1, n})},
                       [](const std::vector<Tensor>& v) { return mul(v[0], v[1]); });
    expect_matches_cpu("sub of a transposed view", {wide, tall},
                       [](const std::vector<Tensor>& v) { return sub(v[0].t(), v[1]); });
    expect_matches_cpu("scale", {x},
                       [](const std::vector<Tensor>& v) { return scale(v[0], -1.5); });
    expect_matches_cpu("add_scalar", {x},
                       [](const std::vector<Tensor>& v) { return add_scalar(v[0], 0.25); });
    // Every unary op of freight/unary_ops.h; log and sqrt on positive inputs.
    for (const UnaryOpInfo& info : kUnaryOps) {
      UnaryOp op = info.op;
      bool positive = op == UnaryOp::Log || op == UnaryOp::Sqrt;
      expect_matches_cpu(info.name, {positive ? pos : x},
                         [op](const std::vector<Tensor>& v) { return unary(op, v[0]); });
    }
  }
}

TEST_F(CudaPoisoned, ReductionKernelsWriteEveryElement) {
  FREIGHT_SKIP_WITHOUT_CUDA();
  for (int64_t n : kOddSizes) {
    SCOPED_TRACE("n = " + std::to_string(n));
    Generator gen{uint64_t(n) + 2};
    Tensor x = Tensor::uniform({n}, -1, 2, DType::F32, Device::cpu(), &gen);
    Tensor x3 = Tensor::uniform({2, n, 3}, -1, 2, DType::F32, Device::cpu(), &gen);
    expect_matches_cpu("sum", {x}, [](const std::vector<Tensor>& v) { return sum(v[0]); });
    expect_matches_cpu("mean", {x}, [](const std::vector<Tensor>& v) { return mean(v[0]); });
    for (int64_t d : {0, 1, 2})
      expect_matches_cpu("sum dim " + std::to_string(d), {x3},
                         [d](const std::vector<Tensor>& v) { return sum(v[0], {d}); });
    expect_matches_cpu("mean dims 0, 2", {x3}, [](const std::vector<Tensor>& v) {
      return mean(v[0], {0, 2});
    });
    for (int64_t d : {0, 1, 2})
      expect_matches_cpu(
          "argmax dim " + std::to_string(d), {x3},
          [d](const std::vector<Tensor>& v) { return argmax(v[0], d); }, false);
    // NaNs (argmax_rule.h: a NaN above everything, the first one wins) at a few places.
    Tensor with_nan = x3.clone();
    for (int64_t i = 0; i < with_nan.numel(); i += 5)
      with_nan.data<float>()[i] = std::numeric_limits<float>::quiet_NaN();
    for (int64_t d : {0, 1, 2})
      expect_matches_cpu(
          "argmax with NaN dim " + std::to_string(d), {with_nan},
          [d](const std::vector<Tensor>& v) { return argmax(v[0], d); }, false);
    // float64 as well (the same kernels, the other instantiation).
    expect_matches_cpu("sum float64", {x3.to(DType::F64)},
                       [](const std::vector<Tensor>& v) { return sum(v[0], {1}); });
  }
  // Long reductions take the split (two-pass) paths: a full sum, and few long columns.
  Generator gen(3);
  Tensor big = Tensor::uniform({1 << 20}, -1, 2, DType::F32, Device::cpu(), &gen);
  expect_matches_cpu("sum of 2^20", {big}, [](const std::vector<Tensor>& v) { return sum(v[0]); });
  Tensor cols = Tensor::uniform({70001, 5}, -1, 2, DType::F32, Device::cpu(), &gen);
  expect_matches_cpu("column sums of [70001, 5]", {cols},
                     [](const std::vector<Tensor>& v) { return sum(v[0], {0}); });
}

TEST_F(CudaPoisoned, MatmulSoftmaxLossEmbeddingDropoutWriteEveryElement) {
  FREIGHT_SKIP_WITHOUT_CUDA();
  for (int64_t n : kOddSizes) {
    SCOPED_TRACE("n = " + std::to_string(n));
    Generator gen{uint64_t(n) + 3};
    auto u = [&](const Shape& s) {
      return Tensor::uniform(s, -1, 2, DType::F32, Device::cpu(), &gen);
    };
    expect_matches_cpu("matmul [n,3]@[3,5]", {u({n, 3}), u({3, 5})},
                       [](const std::vector<Tensor>& v) { return matmul(v[0], v[1]); });
    expect_matches_cpu("batched matmul, k = n", {u({2, 3, n}), u({2, n, 4})},
                       [](const std::vector<Tensor>& v) { return matmul(v[0], v[1]); });
    expect_matches_cpu("linear with bias", {u({n, 6}), u({5, 6}), u({5})},
                       [](const std::vector<Tensor>& v) { return linear(v[0], v[1], v[2]); });
    expect_matches_cpu("linear float64", {u({n, 6}).to(DType::F64), u({5, 6}).to(DType::F64)},
                       [](const std::vector<Tensor>& v) { return linear(v[0], v[1]); });
    for (bool lg : {false, true}) {
      auto sm = [lg](int64_t dim) {
        return Fn([lg, dim](const std::vector<Tensor>& v) {
          return lg ? log_softmax(v[0], dim) : softmax(v[0], dim);
        });
      };
      std::string name = lg ? "log_softmax" : "softmax";
      expect_matches_cpu(name + " rows [3, n]", {u({3, n})}, sm(-1));
      expect_matches_cpu(name + " columns [n, 3] dim 0", {u({n, 3})}, sm(0));
      expect_matches_cpu(name + " middle [2, n, 3] dim 1", {u({2, n, 3})}, sm(1));
    }
    Tensor labels = Tensor::randint({n}, 0, 5, Device::cpu(), &gen);
    expect_matches_cpu("cross_entropy", {u({n, 5}), labels},
                       [](const std::vector<Tensor>& v) { return cross_entropy(v[0], v[1]); });
    Tensor wide_labels = Tensor::randint({3}, 0, n, Device::cpu(), &gen);
    expect_matches_cpu("cross_entropy with n classes", {u({3, n}), wide_labels},
                       [](const std::vector<Tensor>& v) { return cross_entropy(v[0], v[1]); });
    expect_matches_cpu("mse_loss", {u({n}), u({n})},
                       [](const std::vector<Tensor>& v) { return mse_loss(v[0], v[1]); });
    Tensor idx = Tensor::randint({n}, 0, 7, Device::cpu(), &gen);
    expect_matches_cpu("embedding", {idx, u({7, 3})},
                       [](const std::vector<Tensor>& v) { return embedding(v[0], v[1]); });
    expect_matches_cpu("dropout", {u({n})}, [n](const std::vector<Tensor>& v) {
      Generator g{uint64_t(n)};
      return dropout(v[0], 0.3, true, &g);
    });
  }
}

TEST_F(CudaPoisoned, EmptyTensorsAndEmptyMeans) {
  FREIGHT_SKIP_WITHOUT_CUDA();
  Tensor e = Tensor::zeros({0, 3}, DType::F32, kGpu);
  EXPECT_EQ(add(e, e).shape(), (Shape{0, 3}));
  EXPECT_EQ(sum(e).item(), 0.0);
  EXPECT_EQ(sum(e, {0}).to_float_vector(), (std::vector<float>{0, 0, 0}));
  // The mean of nothing is NaN on every device.
  Tensor no_labels = Tensor::zeros({0}, DType::I64, kGpu);
  EXPECT_TRUE(std::isnan(cross_entropy(e, no_labels).item()));
  EXPECT_TRUE(std::isnan(mse_loss(e, e).item()));
  // A matmul with an empty inner dimension is all zeros (beta = 0 ignores the NaN poison).
  Tensor a = Tensor::ones({2, 0}, DType::F32, kGpu), b = Tensor::ones({0, 3}, DType::F32, kGpu);
  EXPECT_EQ(matmul(a, b).to_float_vector(), std::vector<float>(6, 0.0f));
}

}  // namespace
}  // namespace freight::test
