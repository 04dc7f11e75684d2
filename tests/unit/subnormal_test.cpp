// Freight's CPU threads flush subnormal floats to zero (src/backend/cpu/threads.cpp): an
// operation on a subnormal costs about a hundred normal ones, and momentum makes them in
// training. These tests fail where a thread of the pool still computes with subnormals.
#include <gtest/gtest.h>
#include <omp.h>

#include <vector>

#include "freight/freight.h"

namespace freight {
namespace {

// Half of the smallest normal float: subnormal unless flushed to zero.
float halve_smallest_normal() {
  volatile float smallest = 1.17549435e-38f;
  volatile float half = 0.5f;
  return smallest * half;
}

TEST(Subnormals, FlushedOnTheCallingThread) {
  EXPECT_EQ(halve_smallest_normal(), 0.0f);
}

TEST(Subnormals, FlushedOnEveryThreadOfThePool) {
  for (int threads : {num_threads(), 2}) {
    set_num_threads(threads);
    std::vector<float> results(size_t(threads), 1.0f);
#pragma omp parallel num_threads(threads)
    results[size_t(omp_get_thread_num())] = halve_smallest_normal();
    for (int t = 0; t < threads; ++t) EXPECT_EQ(results[size_t(t)], 0.0f) << "thread " << t;
  }
}

// The optimizer state that showed it: momentum of a weight whose gradient is always zero decays
// by 0.9 a step; with flushing it reaches exactly zero instead of lingering as a subnormal.
TEST(Subnormals, DecayingMomentumReachesZero) {
  Tensor w = Tensor::ones({16}).set_requires_grad(true);
  optim::SGD opt({w}, /*lr=*/0.1, /*momentum=*/0.9);
  w.set_grad(Tensor::full({16}, 1e-3));
  opt.step();
  for (int i = 0; i < 1000; ++i) {
    w.set_grad(Tensor::zeros({16}));
    opt.step();
  }
  for (const auto& [name, v] : opt.state())
    if (name.ends_with("momentum_buffer")) {
      const float* m = static_cast<const float*>(v.contiguous().data_ptr());
      for (int64_t i = 0; i < v.numel(); ++i) EXPECT_EQ(m[i], 0.0f) << name << "[" << i << "]";
    }
}

}  // namespace
}  // namespace freight
