// The fused optimizer launches against the CPU kernels: SGD (plain, momentum with dampening and
// weight decay, Nesterov), Adam (with L2 decay, with β1 < 0.5), AdamW, over several steps with
// random gradients, on parameter sizes around the chunk boundary, float32 and float64 mixed in
// one optimizer; parameters with many different step counts (the counts live on the device, one
// per parameter); a learning rate that changes every step (read by the kernels from the device);
// and the steady state, which allocates nothing. Skips without a GPU.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "cuda/cuda_compare.h"
#include "freight/freight.h"
#include "freight/optim/optimizer.h"

namespace freight::test {
namespace {

const Device kGpu = Device::cuda(0);

using MakeOptimizer =
    std::function<std::unique_ptr<optim::Optimizer>(const std::vector<Tensor>& params)>;

struct ParamSpec {
  int64_t n;
  DType dtype;
};

// The same parameters on both devices, `steps` updates with the same random gradients; the
// parameters must agree after every step. `has_grad(step, k)` says whether parameter k gets a
// gradient at that step (a parameter without one is skipped, so step counts can differ);
// `lr_at(step)`, when given, sets the learning rate before each step. The step counts (on the
// device) must agree at the end.
void expect_same_updates(const std::string& what, const std::vector<ParamSpec>& specs,
                         const MakeOptimizer& make, int steps,
                         const std::function<bool(int, size_t)>& has_grad = nullptr,
                         const std::function<double(int)>& lr_at = nullptr) {
  SCOPED_TRACE(what);
  Generator gen(60);
  std::vector<Tensor> cpu, gpu;
  for (const ParamSpec& s : specs) {
    Tensor p = Tensor::normal({s.n}, 0, 1, s.dtype, Device::cpu(), &gen);
    cpu.push_back(p.clone().set_requires_grad(true));
    gpu.push_back(p.to(kGpu).set_requires_grad(true));
  }
  std::unique_ptr<optim::Optimizer> opt_cpu = make(cpu), opt_gpu = make(gpu);
  for (int step = 0; step < steps; ++step) {
    for (size_t k = 0; k < specs.size(); ++k) {
      cpu[k].zero_grad();
      gpu[k].zero_grad();
      if (has_grad && !has_grad(step, k)) continue;
      Tensor g = Tensor::normal({specs[k].n}, 0, 1, specs[k].dtype, Device::cpu(), &gen);
      cpu[k].set_grad(g);
      gpu[k].set_grad(g.to(kGpu));
    }
    if (lr_at) {
      opt_cpu->set_lr(lr_at(step));
      opt_gpu->set_lr(lr_at(step));
    }
    opt_cpu->step();
    opt_gpu->step();
    for (size_t k = 0; k < specs.size(); ++k) {
      const double tol = specs[k].dtype == DType::F32 ? 1e-6 : 1e-13;
      ASSERT_FALSE(any_nan(gpu[k])) << "parameter " << k << " after step " << step;
      ASSERT_LT(relative_error(gpu[k], cpu[k]), tol) << "parameter " << k << " after step " << step;
    }
  }
  EXPECT_EQ(opt_gpu->step_counts(), opt_cpu->step_counts());
}

const std::vector<ParamSpec> kMixed = {
    {1, DType::F32}, {8191, DType::F32},         {8192, DType::F32}, {8193, DType::F64},
    {3, DType::F64}, {3 * 8192 + 5, DType::F32}, {0, DType::F32},    {17, DType::F32}};

using OptimCuda = CudaPoisonedTest;

TEST_F(OptimCuda, SgdVariantsMatchTheCpu) {
  FREIGHT_SKIP_WITHOUT_CUDA();
  using P = const std::vector<Tensor>&;
  expect_same_updates(
      "plain", kMixed, [](P p) { return std::make_unique<optim::SGD>(p, 0.1); }, 4);
  expect_same_updates(
      "plain with weight decay", kMixed,
      [](P p) { return std::make_unique<optim::SGD>(p, 0.1, 0, 0, 0.01); }, 4);
  expect_same_updates(
      "momentum, dampening, weight decay", kMixed,
      [](P p) { return std::make_unique<optim::SGD>(p, 0.05, 0.9, 0.1, 0.001); }, 5);
  expect_same_updates(
      "nesterov", kMixed,
      [](P p) { return std::make_unique<optim::SGD>(p, 0.05, 0.9, 0, 0.01, true); }, 5);
}

TEST_F(OptimCuda, AdamVariantsMatchTheCpu) {
  FREIGHT_SKIP_WITHOUT_CUDA();
  using P = const std::vector<Tensor>&;
  expect_same_updates(
      "adam", kMixed, [](P p) { return std::make_unique<optim::Adam>(p, 1e-2); }, 5);
  expect_same_updates(
      "adam with L2 decay", kMixed,
      [](P p) {
        return std::make_unique<optim::Adam>(p, 1e-2, std::pair{0.9, 0.999}, 1e-8, 0.1);
      },
      5);
  expect_same_updates(
      "adam with beta1 < 0.5", kMixed,
      [](P p) {
        return std::make_unique<optim::Adam>(p, 1e-2, std::pair{0.3, 0.99}, 1e-6);
      },
      5);
  expect_same_updates(
      "adamw", kMixed, [](P p) { return std::make_unique<optim::AdamW>(p, 1e-2); }, 5);
}

TEST_F(OptimCuda, ParametersWithManyDifferentStepCounts) {
  FREIGHT_SKIP_WITHOUT_CUDA();
  // Parameter k gets its first gradient at step k, so after step 40 the 40 parameters have 40
  // different step counts, each read by the kernel from its own slot.
  std::vector<ParamSpec> specs;
  for (int k = 0; k < 40; ++k) specs.push_back({3 + k % 5, k % 3 ? DType::F32 : DType::F64});
  expect_same_updates(
      "adam", specs,
      [](const std::vector<Tensor>& p) { return std::make_unique<optim::Adam>(p, 1e-2); }, 44,
      [](int step, size_t k) { return step >= int(k); });
  expect_same_updates(
      "sgd with momentum", specs,
      [](const std::vector<Tensor>& p) { return std::make_unique<optim::SGD>(p, 0.1, 0.9); }, 12,
      [](int step, size_t k) { return step >= int(k % 10); });
}

// The kernels read the learning rate from the device at run time (what a replayed CUDA graph
// relies on): a rate that changes every step must reach every update.
TEST_F(OptimCuda, ALearningRateThatChangesEveryStepReachesTheKernels) {
  FREIGHT_SKIP_WITHOUT_CUDA();
  using P = const std::vector<Tensor>&;
  auto schedule = [](int step) { return 0.02 / (1 + step); };
  auto every_step = [](int, size_t) { return true; };
  expect_same_updates(
      "nesterov", kMixed,
      [](P p) { return std::make_unique<optim::SGD>(p, 0.1, 0.9, 0, 0.01, true); }, 5, every_step,
      schedule);
  expect_same_updates(
      "adam", kMixed,
      [](P p) {
        return std::make_unique<optim::Adam>(p, 1e-2, std::pair{0.9, 0.999}, 1e-8, 0.1);
      },
      5, every_step, schedule);
  expect_same_updates(
      "adamw", kMixed, [](P p) { return std::make_unique<optim::AdamW>(p, 1e-2); }, 5, every_step,
      schedule);
}

TEST_F(OptimCuda, TheSteadyStateAllocatesNothing) {
  FREIGHT_SKIP_WITHOUT_CUDA();
  Generator gen(61);
  std::vector<Tensor> params, grads;
  for (int64_t n : {5, 9000, 300}) {
    params.push_back(Tensor::normal({n}, 0, 1, DType::F32, kGpu, &gen).set_requires_grad(true));
    grads.push_back(Tensor::normal({n}, 0, 1, DType::F32, kGpu, &gen));
  }
  optim::Adam adam(params, 1e-3);
  optim::SGD sgd(params, 1e-3, 0.9);
  for (int step = 0; step < 6; ++step) {
    for (size_t k = 0; k < params.size(); ++k) params[k].set_grad(grads[k]);
    const MemoryStats before = memory_stats(kGpu);
    adam.step();
    sgd.step();
    const MemoryStats after = memory_stats(kGpu);
    // The first steps create the state buffers and the tables; after that, nothing.
    if (step >= 2) {
      EXPECT_EQ(after.allocs, before.allocs) << "step " << step;
    }
  }
  synchronize(kGpu);
  for (const Tensor& p : params) EXPECT_FALSE(any_nan(p));
}

}  // namespace
}  // namespace freight::test
