// Pooling on CUDA beyond the op table: float64, odd sizes with poisoned allocations, and the
// CPU's conventions kept exactly (max pooling: ties go to the first element of the window, NaN
// wins, windows of −∞ route their gradient to the first position inside the plane; the max
// gradients are sums in the CPU's order, so they agree bit for bit). Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "cuda/cuda_compare.h"
#include "freight/freight.h"

namespace freight::test {
namespace {

struct PoolCase {
  Shape x;
  Pair kernel, stride, padding;
};

const std::vector<PoolCase> kCases = {
    {{1, 1, 1, 1}, {1, 1}, {1, 1}, {0, 0}},
    {{2, 3, 17, 13}, {2, 2}, {2, 2}, {0, 0}},  // odd planes: the last row and column unused
    {{3, 2, 15, 16}, {3, 3}, {2, 2}, {1, 1}},
    {{2, 2, 9, 11}, {3, 2}, {1, 3}, {1, 1}},  // overlapping rows, gaps between columns
    {{1, 5, 7, 7}, {7, 7}, {1, 1}, {0, 0}},   // global
    {{4, 3, 33, 31}, {5, 4}, {2, 3}, {2, 2}},
    {{3, 129, 65}, {2, 3}, {1, 2}, {1, 0}},  // 3-D input [C, H, W]
};

TensorFn pool_fn(bool max, const PoolCase& c) {
  return [=](const std::vector<Tensor>& v) {
    return max ? max_pool2d(v[0], c.kernel, c.stride, c.padding)
               : avg_pool2d(v[0], c.kernel, c.stride, c.padding);
  };
}

using PoolCuda = CudaPoisonedTest;

TEST_F(PoolCuda, MatchesCpuInBothPrecisions) {
  FREIGHT_SKIP_WITHOUT_CUDA();
  for (DType dt : {DType::F32, DType::F64})
    for (size_t i = 0; i < kCases.size(); ++i) {
      Generator gen(30 + i);
      Tensor x = Tensor::normal(kCases[i].x, 0, 1, dt, Device::cpu(), &gen);
      const std::string what = std::string(dtype_name(dt)) + " case " + std::to_string(i);
      // Max pooling selects and adds in the CPU's order: bit for bit the same.
      expect_cuda_matches_cpu("max " + what, {x}, pool_fn(true, kCases[i]), 0, true);
      expect_cuda_matches_cpu("avg " + what, {x}, pool_fn(false, kCases[i]),
                              dt == DType::F32 ? 1e-5 : 1e-12);
    }
}

TEST_F(PoolCuda, MaxPoolingTiesNanAndInfinityFollowTheCpu) {
  FREIGHT_SKIP_WITHOUT_CUDA();
  const double inf = std::numeric_limits<double>::infinity();
  const PoolCase overlap{{1, 1, 6, 7}, {3, 3}, {1, 2}, {1, 1}};
  // All equal: every window's first element wins, and overlapping windows add at the winners.
  expect_cuda_matches_cpu("ties", {Tensor::full({1, 1, 6, 7}, 0.5)}, pool_fn(true, overlap), 0,
                          true);
  // −∞ everywhere: the maximum is −∞ and the gradient goes to the first position in the plane.
  expect_cuda_matches_cpu("all -inf", {Tensor::full({1, 1, 6, 7}, -inf)}, pool_fn(true, overlap), 0,
                          true);
  // A NaN wins its windows; +inf beats finite values.
  std::vector<double> v(42);
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(double(i));
  v[9] = std::nan("");
  v[30] = inf;
  v[31] = inf;  // a tie of infinities: the first stays
  expect_cuda_matches_cpu("nan and inf", {Tensor::from_vector(v, {1, 1, 6, 7})},
                          pool_fn(true, overlap), 0, true, /*grads=*/false);
  // Without the NaN (its gradient would be NaN everywhere in L): the routing of the infinities.
  v[9] = 0.25;
  expect_cuda_matches_cpu("inf", {Tensor::from_vector(v, {1, 1, 6, 7})}, pool_fn(true, overlap), 0,
                          true);
}

// relu keeps a NaN (PyTorch's rule) and passes its gradient, alone and fused: relu, add_relu and
// both max poolings with a ReLU give the CPU's values bit for bit, NaN in the same places, and
// the same gradients (the NaN's window routes its gradient to the NaN).
TEST_F(PoolCuda, ReluAndItsFusionsKeepNanAsTheCpu) {
  FREIGHT_SKIP_WITHOUT_CUDA();
  std::vector<double> v(2 * 6 * 7);
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(double(3 * i + 1));
  v[9] = v[40] = v[77] = std::nan("");
  v[10] = -0.0;
  const Tensor x = Tensor::from_vector(v, {1, 2, 6, 7});
  for (DType dt : {DType::F32, DType::F64}) {
    const Tensor xt = x.to(dt);
    const Tensor other = Tensor::full({1, 2, 6, 7}, 0.125).to(dt);
    SCOPED_TRACE(dtype_name(dt));
    expect_cuda_matches_cpu(
        "relu", {xt}, [](const std::vector<Tensor>& t) { return relu(t[0]); }, 0, true);
    expect_cuda_matches_cpu(
        "add_relu", {xt, other}, [](const std::vector<Tensor>& t) { return add_relu(t[0], t[1]); },
        0, true);
    expect_cuda_matches_cpu(
        "relu_max_pool2d", {xt},
        [](const std::vector<Tensor>& t) {
          return relu_max_pool2d(t[0], {3, 3}, {2, 2}, {1, 1});
        },
        0, true);
    expect_cuda_matches_cpu(
        "max_pool2d_relu", {xt},
        [](const std::vector<Tensor>& t) {
          return max_pool2d_relu(t[0], {2, 2}, {2, 2}, {0, 0});
        },
        0, true);
  }
}

TEST_F(PoolCuda, ManyPlanes) {
  FREIGHT_SKIP_WITHOUT_CUDA();
  Generator gen(4);
  Tensor x = Tensor::normal({257, 129, 4, 6}, 0, 1, DType::F32, Device::cpu(), &gen);
  const PoolCase c{{257, 129, 4, 6}, {2, 2}, {2, 2}, {0, 0}};
  expect_cuda_matches_cpu("max", {x}, pool_fn(true, c), 0, true);
  expect_cuda_matches_cpu("avg", {x}, pool_fn(false, c), 1e-5);
}

}  // namespace
}  // namespace freight::test
