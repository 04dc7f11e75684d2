// conv2d on CUDA (cuDNN) beyond the op table's float32 comparisons: float64, odd and larger
// shapes with poisoned allocations, a misaligned input view, no input channels, the plan and
// algorithm cache, and deterministic mode. Each test skips without a GPU.
#include <gtest/gtest.h>

#include "cuda/cuda_compare.h"
#include "freight/freight.h"
#if FREIGHT_WITH_CUDA
#include "backend/cuda/conv_plan_cache.h"
#endif

namespace freight::test {
namespace {

const Device kGpu = Device::cuda(0);

TensorFn conv_fn(Pair stride, Pair padding, Pair dilation, bool bias = true) {
  return [=](const std::vector<Tensor>& v) {
    return conv2d(v[0], v[1], bias ? v[2] : Tensor(), stride, padding, dilation);
  };
}

std::vector<Tensor> conv_inputs(Shape x, Shape w, DType dtype, uint64_t seed) {
  Generator gen(seed);
  return {Tensor::normal(x, 0, 1, dtype, Device::cpu(), &gen),
          Tensor::normal(w, 0, 1, dtype, Device::cpu(), &gen),
          Tensor::normal({w[0]}, 0, 1, dtype, Device::cpu(), &gen)};
}

using ConvCuda = CudaPoisonedTest;

TEST_F(ConvCuda, MatchesCpuInBothPrecisionsOnOddShapes) {
  FREIGHT_SKIP_WITHOUT_CUDA();
  struct Case {
    Shape x, w;
    Pair stride, padding, dilation;
  };
  const std::vector<Case> cases = {
      {{1, 1, 1, 1}, {1, 1, 1, 1}, {1, 1}, {0, 0}, {1, 1}},
      {{3, 5, 17, 13}, {7, 5, 3, 3}, {1, 1}, {1, 1}, {1, 1}},
      {{2, 3, 31, 29}, {5, 3, 5, 4}, {2, 3}, {2, 1}, {1, 1}},
      {{2, 4, 19, 23}, {3, 4, 3, 3}, {1, 2}, {2, 2}, {2, 3}},
      {{5, 16, 12, 12}, {33, 16, 1, 1}, {2, 2}, {0, 0}, {1, 1}},
      {{1, 2, 9, 9}, {1, 2, 9, 9}, {1, 1}, {0, 0}, {1, 1}},  // the kernel covers the image
  };
  for (DType dt : {DType::F32, DType::F64}) {
    for (size_t i = 0; i < cases.size(); ++i) {
      const Case& c = cases[i];
      expect_cuda_matches_cpu(std::string(dtype_name(dt)) + " case " + std::to_string(i),
                              conv_inputs(c.x, c.w, dt, 10 + i),
                              conv_fn(c.stride, c.padding, c.dilation),
                              dt == DType::F32 ? 1e-4 : 1e-10);
      std::vector<Tensor> no_bias = conv_inputs(c.x, c.w, dt, 20 + i);
      no_bias.pop_back();
      expect_cuda_matches_cpu(std::string(dtype_name(dt)) + " no bias, case " + std::to_string(i),
                              no_bias, conv_fn(c.stride, c.padding, c.dilation, false),
                              dt == DType::F32 ? 1e-4 : 1e-10);
    }
  }
}

// conv2d_relu: the ReLU in the bias kernel's pass, and the mask in the backward: a pass before
// both convolution passes, or (the input needing no gradient, as a first layer's) inside the
// weight gradient. The second form detaches x and gives it a zero gradient by another path, so
// the comparison still has one.
TEST_F(ConvCuda, FusedReluMatchesCpuWithAndWithoutAnInputGradient) {
  FREIGHT_SKIP_WITHOUT_CUDA();
  for (DType dt : {DType::F32, DType::F64}) {
    for (bool bias : {true, false}) {
      std::vector<Tensor> in = conv_inputs({3, 2, 9, 8}, {5, 2, 3, 3}, dt, bias ? 31 : 32);
      if (!bias) in.pop_back();
      const std::string what = std::string(dtype_name(dt)) + (bias ? "" : ", no bias");
      auto conv = [bias](const Tensor& x, const std::vector<Tensor>& v) {
        return conv2d_relu(x, v[1], bias ? v[2] : Tensor(), {1, 1}, {1, 1});
      };
      expect_cuda_matches_cpu(
          what, in, [&](const std::vector<Tensor>& v) { return conv(v[0], v); },
          dt == DType::F32 ? 1e-4 : 1e-10);
      expect_cuda_matches_cpu(
          what + ", no input gradient", in,
          [&](const std::vector<Tensor>& v) {
            return add(conv(v[0].detach(), v), scale(sum(v[0]), 0.0));
          },
          dt == DType::F32 ? 1e-4 : 1e-10);
    }
  }
}

TEST_F(ConvCuda, AMisalignedInputViewIsHandled) {
  FREIGHT_SKIP_WITHOUT_CUDA();
  // Images of 3·5·5 = 75 floats: image 1 starts 300 bytes into the storage, not 16-aligned.
  std::vector<Tensor> in = conv_inputs({4, 3, 5, 5}, {2, 3, 3, 3}, DType::F32, 5);
  expect_cuda_matches_cpu("slice of images 1..2", in, [](const std::vector<Tensor>& v) {
    return conv2d(v[0].slice(0, 1, 3), v[1], v[2], {1, 1}, {1, 1});
  });
}

TEST_F(ConvCuda, NoInputChannelsGivesTheBias) {
  FREIGHT_SKIP_WITHOUT_CUDA();
  Generator gen(3);
  Tensor x = Tensor::zeros({2, 0, 4, 5});
  Tensor w = Tensor::zeros({3, 0, 3, 3});
  Tensor b = Tensor::normal({3}, 0, 1, DType::F32, Device::cpu(), &gen);
  expect_cuda_matches_cpu("c = 0", {x, w, b}, conv_fn({1, 1}, {1, 1}, {1, 1}));
}

#if FREIGHT_WITH_CUDA
TEST_F(ConvCuda, PlansAndAlgorithmChoicesAreReusedForARepeatedShape) {
  FREIGHT_SKIP_WITHOUT_CUDA();
  std::vector<Tensor> in = conv_inputs({3, 2, 11, 10}, {4, 2, 3, 3}, DType::F32, 7);
  auto step = [&](const std::vector<Tensor>& v) {
    Tensor x = v[0].to(kGpu), w = v[1].to(kGpu), b = v[2].to(kGpu);
    x.set_requires_grad(true), w.set_requires_grad(true), b.set_requires_grad(true);
    sum(conv2d(x, w, b, {1, 1}, {1, 1})).backward();
    synchronize(kGpu);
  };
  step(in);
  const cuda::ConvPlanCacheStats first = cuda::conv_plan_cache_stats();
  EXPECT_GE(first.plans, 1);
  EXPECT_GE(first.choices, 3);  // forward, backward data, backward filter
  for (int i = 0; i < 3; ++i) step(in);
  const cuda::ConvPlanCacheStats again = cuda::conv_plan_cache_stats();
  EXPECT_EQ(again.plans, first.plans) << "a repeated shape built a new plan";
  EXPECT_EQ(again.choices, first.choices) << "a repeated shape chose its algorithms again";
  // Another batch size is another plan, with choices of its own.
  step(conv_inputs({5, 2, 11, 10}, {4, 2, 3, 3}, DType::F32, 8));
  const cuda::ConvPlanCacheStats other = cuda::conv_plan_cache_stats();
  EXPECT_EQ(other.plans, first.plans + 1);
  EXPECT_EQ(other.choices, first.choices + 3);
}

TEST_F(ConvCuda, DeterministicModeGivesReproducibleGradientsMatchingTheCpu) {
  FREIGHT_SKIP_WITHOUT_CUDA();
  set_deterministic(true);
  EXPECT_TRUE(deterministic());
  const cuda::ConvPlanCacheStats before = cuda::conv_plan_cache_stats();
  std::vector<Tensor> in = conv_inputs({8, 6, 14, 14}, {12, 6, 3, 3}, DType::F32, 9);
  auto grads = [&] {
    Tensor x = in[0].to(kGpu), w = in[1].to(kGpu), b = in[2].to(kGpu);
    x.set_requires_grad(true), w.set_requires_grad(true), b.set_requires_grad(true);
    sum(square(conv2d(x, w, b, {1, 1}, {1, 1}))).backward();
    return std::vector<Tensor>{x.grad(), w.grad(), b.grad()};
  };
  std::vector<Tensor> a = grads(), b = grads();
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_TRUE(same_values(a[i], b[i])) << "gradient " << i << " differs between two runs";
  // The mode is part of the plan key: this shape got plans and choices of its own, and none of
  // them is an algorithm that accumulates with atomics (cuDNN's BWD_DATA_ALGO_0 and
  // BWD_FILTER_ALGO_0 and _3).
  const cuda::ConvPlanCacheStats after = cuda::conv_plan_cache_stats();
  EXPECT_EQ(after.choices, before.choices + 3);
  EXPECT_NE(after.last_choice[1], 0) << "backward data";
  EXPECT_NE(after.last_choice[2], 0) << "backward filter";
  EXPECT_NE(after.last_choice[2], 3) << "backward filter";
  expect_cuda_matches_cpu("deterministic mode", in, conv_fn({1, 1}, {1, 1}, {1, 1}));
  set_deterministic(false);
  EXPECT_FALSE(deterministic());
}
#endif

}  // namespace
}  // namespace freight::test
