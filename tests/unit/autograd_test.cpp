#include <gtest/gtest.h>

#include <cmath>

#include "common/test_util.h"
#include "freight/freight.h"

namespace freight {
namespace {

// f(x, y) = Σ (x·y + x)·tanh(y) with x used twice and y used twice: shared inputs must
// accumulate gradients from every path.
TEST(Autograd, CompositeGraphWithSharedInputs) {
  Generator g(3);
  Tensor x = Tensor::normal({3, 4}, 0, 1, DType::F64, Device::cpu(), &g).set_requires_grad();
  Tensor y = Tensor::normal({3, 4}, 0, 1, DType::F64, Device::cpu(), &g).set_requires_grad();
  Tensor f = sum(mul(add(mul(x, y), x), tanh(y)));
  f.backward();
  std::vector<double> vx = x.to_double_vector(), vy = y.to_double_vector();
  std::vector<double> gx = x.grad().to_double_vector(), gy = y.grad().to_double_vector();
  for (size_t i = 0; i < vx.size(); ++i) {
    double t = std::tanh(vy[i]);
    // ∂f/∂x = (y + 1)·tanh(y); ∂f/∂y = x·tanh(y) + (x·y + x)(1 − tanh²(y))
    EXPECT_NEAR(gx[i], (vy[i] + 1) * t, 1e-12);
    EXPECT_NEAR(gy[i], vx[i] * t + (vx[i] * vy[i] + vx[i]) * (1 - t * t), 1e-12);
  }
}

TEST(Autograd, GradientsAccumulateAcrossBackwardCalls) {
  Tensor w = Tensor::from_vector(std::vector<double>{1, 2}, {2}).set_requires_grad();
  sum(mul(w, w)).backward();
  sum(mul(w, w)).backward();
  EXPECT_EQ(w.grad().to_double_vector(), (std::vector<double>{4, 8}));
  w.zero_grad();
  EXPECT_FALSE(w.grad().defined());
}

TEST(Autograd, SameTensorTwiceInOneOpAndGradIsNotAliased) {
  Tensor a = Tensor::from_vector(std::vector<double>{3}, {1}).set_requires_grad();
  Tensor b = Tensor::from_vector(std::vector<double>{5}, {1}).set_requires_grad();
  sum(add(a, b)).backward();  // both receive the same gradient tensor
  a.grad().fill_(7);          // must not change b's gradient
  EXPECT_EQ(b.grad().to_double_vector(), (std::vector<double>{1}));
  Tensor c = Tensor::from_vector(std::vector<double>{2}, {1}).set_requires_grad();
  sum(mul(c, c)).backward();
  EXPECT_EQ(c.grad().to_double_vector(), (std::vector<double>{4}));
}

TEST(Autograd, NoGradScopeRecordsNothing) {
  Tensor w = Tensor::ones({2}).set_requires_grad();
  {
    NoGradGuard guard;
    Tensor y = mul(w, w);
    EXPECT_FALSE(y.requires_grad());
    EXPECT_TRUE(y.is_leaf());
  }
  Tensor z = mul(w, w);
  EXPECT_TRUE(z.requires_grad());
  EXPECT_STREQ(grad_fn_name(z), "mul");
}

TEST(Autograd, BackwardTwiceWithoutRetainIsAClearError) {
  Tensor w = Tensor::ones({2}).set_requires_grad();
  Tensor l = sum(mul(w, w));
  l.backward();
  EXPECT_THROW(l.backward(), Error);
  Tensor l2 = sum(mul(w, w));
  l2.backward(Tensor(), /*retain_graph=*/true);
  EXPECT_NO_THROW(l2.backward());
}

TEST(Autograd, NonScalarRootNeedsAGradient) {
  Tensor w = Tensor::ones({2}).set_requires_grad();
  Tensor y = mul(w, w);
  EXPECT_THROW(y.backward(), Error);
  y.backward(Tensor::from_vector(std::vector<float>{1, 2}, {2}));
  EXPECT_EQ(w.grad().to_float_vector(), (std::vector<float>{2, 4}));
}

TEST(Autograd, UnusedBranchOfAMultiUseTensorStillPropagates) {
  // y feeds two consumers; one of them does not lead to the loss.
  Tensor x = Tensor::from_vector(std::vector<double>{1, 2}, {2}).set_requires_grad();
  Tensor y = mul(x, x);
  Tensor unused = exp(y);
  (void)unused;
  sum(y).backward();
  EXPECT_EQ(x.grad().to_double_vector(), (std::vector<double>{2, 4}));
}

}  // namespace
}  // namespace freight

namespace freight {
namespace {

// An elementwise op keeps only the tensor its backward reads: relu its output, not its input.
// Here the input of relu is an intermediate (2x, whose own backward needs nothing), so once its
// handle is gone it must be freed, though the graph is alive.
TEST(AutogradMemory, ReluKeepsOnlyItsOutputForBackward) {
  const int64_t n = 1 << 18;  // 1 MiB of float
  Tensor x = Tensor::normal({n}, 0, 1, DType::F32, Device::cpu()).set_requires_grad(true);
  const size_t before = memory_stats(Device::cpu()).in_use;
  Tensor y;
  {
    Tensor t = scale(x, 2.0);
    y = relu(t);
  }
  const size_t kept = memory_stats(Device::cpu()).in_use - before;
  EXPECT_EQ(kept, size_t(n) * sizeof(float)) << "relu's input should have been freed";
  sum(y).backward();
  std::vector<double> g = x.grad().to_double_vector(), xv = x.to_double_vector();
  for (int64_t i = 0; i < n; i += 997) EXPECT_EQ(g[i], xv[i] > 0 ? 2.0 : 0.0) << i;
}

}  // namespace
}  // namespace freight
