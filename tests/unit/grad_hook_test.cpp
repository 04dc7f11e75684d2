// set_grad_accumulated_hook: what the data-parallel reducer relies on to start summing a bucket
// of gradients over the ranks while backward goes on.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "freight/freight.h"

namespace freight {
namespace {

TEST(GradHook, RunsOnceAfterTheLeafsWholeGradient) {
  // a is used twice (two contributions), b once, c not at all: a's hook must see the sum of both
  // contributions and run once; c's never runs.
  Tensor a = Tensor::from_vector(std::vector<double>{1, 2}, {2}).set_requires_grad();
  Tensor b = Tensor::from_vector(std::vector<double>{3, 4}, {2}).set_requires_grad();
  Tensor c = Tensor::from_vector(std::vector<double>{5, 6}, {2}).set_requires_grad();
  std::vector<std::string> calls;
  std::vector<double> a_grad_seen;
  set_grad_accumulated_hook(a, [&] {
    calls.push_back("a");
    a_grad_seen = a.grad().to_double_vector();
  });
  set_grad_accumulated_hook(b, [&] { calls.push_back("b"); });
  set_grad_accumulated_hook(c, [&] { calls.push_back("c"); });
  // f = Σ (a·a) · b → ∂f/∂a = 2·a·b
  Tensor f = sum(mul(mul(a, a), b));
  f.backward();
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(std::count(calls.begin(), calls.end(), "a"), 1);
  EXPECT_EQ(std::count(calls.begin(), calls.end(), "b"), 1);
  EXPECT_EQ(a_grad_seen, (std::vector<double>{6, 16}));
  // Accumulating onto an existing gradient runs the hook again, with the new total.
  sum(mul(mul(a, a), b)).backward();
  EXPECT_EQ(a_grad_seen, (std::vector<double>{12, 32}));
  EXPECT_EQ(std::count(calls.begin(), calls.end(), "a"), 2);
  set_grad_accumulated_hook(a, nullptr);
  sum(a).backward();
  EXPECT_EQ(std::count(calls.begin(), calls.end(), "a"), 2);
}

TEST(GradHook, LayersCloserToTheLossComeFirst) {
  // Backward reaches the last layer's parameters first: the reducer's bucket order relies on it.
  manual_seed(3);
  nn::Sequential net{std::make_shared<nn::Linear>(4, 8), std::make_shared<nn::ReLU>(),
                     std::make_shared<nn::Linear>(8, 3)};
  std::vector<Tensor> params = net.parameters();  // 0.weight 0.bias 2.weight 2.bias
  ASSERT_EQ(params.size(), 4u);
  std::vector<size_t> order;  // parameter indices, in the order their hooks ran
  for (size_t i = 0; i < params.size(); ++i)
    set_grad_accumulated_hook(params[i], [&order, i] { order.push_back(i); });
  Tensor x = Tensor::normal({5, 4});
  sum(net(x)).backward();
  ASSERT_EQ(order.size(), params.size());
  EXPECT_GE(std::min(order[0], order[1]), 2u);
  EXPECT_LE(std::max(order[2], order[3]), 1u);
  for (const Tensor& p : params) set_grad_accumulated_hook(p, nullptr);
}

TEST(GradHook, OnlyLeavesThatRequireGradTakeAHook) {
  Tensor t = Tensor::from_vector(std::vector<double>{1}, {1});
  EXPECT_THROW(set_grad_accumulated_hook(t, [] {}), Error);
}

}  // namespace
}  // namespace freight
