// nn::BatchNorm with its statistics summed over the ranks (--sync-bn), in one process: with a
// sum that changes nothing (one rank) it is the fused op; over two ranks (two threads here) it is
// the fused op on both ranks' rows, in outputs, input gradients, parameter gradients (each
// rank's share) and running statistics. The job itself is tested on real ranks in
// tests/dist/ranks.
#include <gtest/gtest.h>

#include <barrier>
#include <cmath>
#include <memory>
#include <thread>

#include "common/test_util.h"
#include "freight/freight.h"

namespace freight {
namespace {

using test::max_abs_diff;

// A BatchNorm2d(3) in float64 with random weight, bias and running statistics, the same for
// every seed.
std::unique_ptr<nn::BatchNorm2d> layer(uint64_t seed) {
  auto bn = std::make_unique<nn::BatchNorm2d>(3, 1e-5, 0.2);
  bn->to(DType::F64);
  Generator gen(seed);
  for (auto [name, t] : bn->state_dict())
    if (t.dtype() == DType::F64)
      t.copy_(Tensor::uniform(t.shape(), 0.5, 1.5, DType::F64, Device::cpu(), &gen));
  return bn;
}

struct Pass {
  Tensor y, dx, dw, db;
  nn::NamedTensors state;
};

// Forward of `x` then backward of Σ g ⊙ y (with ReLU fused when `relu`).
Pass run(nn::BatchNorm2d& bn, const Tensor& x_in, const Tensor& g, bool relu) {
  Tensor x = x_in.detach().clone();
  x.set_requires_grad(true);
  Tensor y = relu ? bn.forward_relu(x) : bn(x);
  sum(mul(y, g)).backward();
  Pass p{y.detach(), x.grad(), bn.weight().grad(), bn.bias().grad(), bn.state_dict()};
  return p;
}

TEST(SyncBatchNorm, OneRankIsTheFusedLayer) {
  for (bool relu : {false, true}) {
    SCOPED_TRACE(relu ? "with ReLU" : "alone");
    Generator gen(3);
    Tensor x = Tensor::normal({4, 3, 5, 2}, 1.0, 2.0, DType::F64, Device::cpu(), &gen);
    Tensor g = Tensor::normal({4, 3, 5, 2}, 0.0, 1.0, DType::F64, Device::cpu(), &gen);
    auto fused = layer(7), synced = layer(7);
    int calls = 0;
    synced->set_sum_over_ranks([&calls](Tensor&) { ++calls; });
    Pass want = run(*fused, x, g, relu), got = run(*synced, x, g, relu);
    EXPECT_EQ(calls, 5) << "the count, the two statistics forward and their gradients backward";
    EXPECT_LE(max_abs_diff(got.y, want.y), 1e-12);
    EXPECT_LE(max_abs_diff(got.dx, want.dx), 1e-12);
    EXPECT_LE(max_abs_diff(got.dw, want.dw), 1e-12);
    EXPECT_LE(max_abs_diff(got.db, want.db), 1e-12);
    for (size_t i = 0; i < want.state.size(); ++i)
      EXPECT_LE(max_abs_diff(got.state[i].second, want.state[i].second), 1e-12)
          << want.state[i].first;
    // Evaluation never sums: the running statistics are the same on every rank.
    synced->eval();
    calls = 0;
    (*synced)(x);
    EXPECT_EQ(calls, 0);
  }
}

// Two ranks as two threads of this process: each sum over the ranks adds the two threads'
// tensors (a barrier on each side of the exchange).
class TwoThreadRanks {
 public:
  void sum(int rank, Tensor& t) {
    NoGradGuard no_grad;
    mine_[rank] = t.clone();
    sync_.arrive_and_wait();
    t.copy_(add(mine_[0], mine_[1]));
    sync_.arrive_and_wait();  // both have read before the next sum overwrites
  }

 private:
  std::barrier<> sync_{2};
  Tensor mine_[2];
};

TEST(SyncBatchNorm, TwoRanksAreOneProcessOnBothBatches) {
  Generator gen(4);
  // Rank 1's rows come from another distribution and there are more of them: local statistics
  // would differ from the global ones.
  Tensor x0 = Tensor::normal({3, 3, 2, 4}, -1.0, 3.0, DType::F64, Device::cpu(), &gen);
  Tensor x1 = Tensor::normal({5, 3, 2, 4}, 2.0, 0.5, DType::F64, Device::cpu(), &gen);
  Tensor g0 = Tensor::normal({3, 3, 2, 4}, 0.0, 1.0, DType::F64, Device::cpu(), &gen);
  Tensor g1 = Tensor::normal({5, 3, 2, 4}, 0.0, 1.0, DType::F64, Device::cpu(), &gen);
  for (bool relu : {false, true}) {
    SCOPED_TRACE(relu ? "with ReLU" : "alone");
    auto fused = layer(9);
    Pass want = run(*fused, cat({x0, x1}, 0), cat({g0, g1}, 0), relu);
    TwoThreadRanks ranks;
    auto bn0 = layer(9), bn1 = layer(9);
    bn0->set_sum_over_ranks([&ranks](Tensor& t) { ranks.sum(0, t); });
    bn1->set_sum_over_ranks([&ranks](Tensor& t) { ranks.sum(1, t); });
    Pass got0, got1;
    std::thread other([&] { got1 = run(*bn1, x1, g1, relu); });
    got0 = run(*bn0, x0, g0, relu);
    other.join();
    EXPECT_LE(max_abs_diff(cat({got0.y, got1.y}, 0), want.y), 1e-12);
    // Each rank's rows get the gradient of one process over both ranks' rows ...
    EXPECT_LE(max_abs_diff(cat({got0.dx, got1.dx}, 0), want.dx), 1e-12);
    // ... and the parameters each rank's share, which the reducer sums over the ranks.
    EXPECT_LE(max_abs_diff(add(got0.dw, got1.dw), want.dw), 1e-12);
    EXPECT_LE(max_abs_diff(add(got0.db, got1.db), want.db), 1e-12);
    for (const Pass* got : {&got0, &got1})
      for (size_t i = 0; i < want.state.size(); ++i)
        EXPECT_LE(max_abs_diff(got->state[i].second, want.state[i].second), 1e-12)
            << want.state[i].first;
    // Without the sums, rank 0's own rows give other gradients (so the checks above can fail).
    auto local = layer(9);
    EXPECT_GT(max_abs_diff(run(*local, x0, g0, relu).dx, want.dx.slice(0, 0, 3)), 1e-2);
  }
}

TEST(AllReduceSum, NeedsAFunction) {
  EXPECT_THROW(all_reduce_sum(Tensor::ones({2}), SumOverRanks()), Error);
}

}  // namespace
}  // namespace freight
