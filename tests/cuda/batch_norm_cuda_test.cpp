// Batch normalisation on CUDA beyond the op table: the running statistics after several
// training steps (unbiased variance, momentum) against the CPU, evaluation from them, float64,
// [N, C] inputs (strided channels), optional affine parameters, a fused ReLU, a large mean (the
// shifted variance), a channel holding ±∞ or NaN, and odd sizes with poisoned allocations.
// Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "cuda/cuda_compare.h"
#include "freight/freight.h"

namespace freight::test {
namespace {

const Device kGpu = Device::cuda(0);

using BatchNormCuda = CudaPoisonedTest;

TEST_F(BatchNormCuda, RunningStatisticsFollowTheCpuOverTrainingSteps) {
  FREIGHT_SKIP_WITHOUT_CUDA();
  for (DType dt : {DType::F32, DType::F64}) {
    for (const Shape& shape : {Shape{7, 5}, Shape{4, 3, 9}, Shape{3, 6, 5, 7}}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " " + shape_str(shape));
      const int64_t c = shape[1];
      Generator gen(41);
      Tensor rm_cpu = Tensor::normal({c}, 0, 1, dt, Device::cpu(), &gen);
      Tensor rv_cpu = Tensor::uniform({c}, 0.5, 2, dt, Device::cpu(), &gen);
      Tensor rm_gpu = rm_cpu.to(kGpu), rv_gpu = rv_cpu.to(kGpu);
      for (int step = 0; step < 4; ++step) {
        Tensor x = Tensor::normal(shape, 3.0 * step, 1 + step, dt, Device::cpu(), &gen);
        Tensor y_cpu = batch_norm(x, Tensor(), Tensor(), rm_cpu, rv_cpu, true, 0.3, 1e-5);
        Tensor y_gpu = batch_norm(x.to(kGpu), Tensor(), Tensor(), rm_gpu, rv_gpu, true, 0.3, 1e-5);
        const double tol = dt == DType::F32 ? 1e-5 : 1e-12;
        EXPECT_LT(relative_error(y_gpu, y_cpu), tol) << "step " << step;
        EXPECT_LT(relative_error(rm_gpu, rm_cpu), tol) << "running mean, step " << step;
        EXPECT_LT(relative_error(rv_gpu, rv_cpu), tol) << "running var, step " << step;
      }
      // Evaluation from the running statistics.
      Tensor x = Tensor::normal(shape, 1, 2, dt, Device::cpu(), &gen);
      Tensor w = Tensor::normal({c}, 1, 0.5, dt, Device::cpu(), &gen);
      Tensor b = Tensor::normal({c}, 0, 1, dt, Device::cpu(), &gen);
      expect_cuda_matches_cpu(
          "eval", {x, w, b},
          [rm_cpu, rv_cpu](const std::vector<Tensor>& v) {
            const Device d = v[0].device();
            return batch_norm(v[0], v[1], v[2], rm_cpu.to(d), rv_cpu.to(d), false, 0.1, 1e-5);
          },
          dt == DType::F32 ? 1e-5 : 1e-12);
    }
  }
}

TEST_F(BatchNormCuda, TrainingGradientsMatchTheCpu) {
  FREIGHT_SKIP_WITHOUT_CUDA();
  for (DType dt : {DType::F32, DType::F64}) {
    for (const Shape& shape :
         {Shape{2, 3}, Shape{33, 17}, Shape{5, 4, 31}, Shape{3, 7, 9, 11}, Shape{2, 2, 129, 65}}) {
      Generator gen(42);
      const int64_t c = shape[1];
      Tensor x = Tensor::normal(shape, 0.5, 2, dt, Device::cpu(), &gen);
      Tensor w = Tensor::normal({c}, 1, 0.5, dt, Device::cpu(), &gen);
      Tensor b = Tensor::normal({c}, 0, 1, dt, Device::cpu(), &gen);
      const std::string what = std::string(dtype_name(dt)) + " " + shape_str(shape);
      const double tol = dt == DType::F32 ? 1e-4 : 1e-10;
      expect_cuda_matches_cpu(
          what + " affine", {x, w, b},
          [](const std::vector<Tensor>& v) {
            return batch_norm(v[0], v[1], v[2], Tensor(), Tensor(), true, 0.1, 1e-5);
          },
          tol);
      expect_cuda_matches_cpu(
          what + " no affine", {x},
          [](const std::vector<Tensor>& v) {
            return batch_norm(v[0], Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5);
          },
          tol);
      // With a fused ReLU: the GPU recomputes the mask from x as the CPU does.
      expect_cuda_matches_cpu(
          what + " fused relu", {x, w, b},
          [](const std::vector<Tensor>& v) {
            return batch_norm_relu(v[0], v[1], v[2], Tensor(), Tensor(), true, 0.1, 1e-5);
          },
          tol);
      expect_cuda_matches_cpu(
          what + " fused relu, no affine", {x},
          [](const std::vector<Tensor>& v) {
            return batch_norm_relu(v[0], Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5);
          },
          tol);
    }
  }
}

TEST_F(BatchNormCuda, ALargeMeanKeepsItsVariance) {
  FREIGHT_SKIP_WITHOUT_CUDA();
  // Values 1e4 ± 1: E[x²] − E[x]² would lose every digit of the variance in float32.
  Generator gen(43);
  Tensor x = Tensor::normal({64, 3, 5, 5}, 1e4, 1, DType::F32, Device::cpu(), &gen);
  Tensor rm_cpu = Tensor::zeros({3}), rv_cpu = Tensor::ones({3});
  Tensor rm_gpu = rm_cpu.to(kGpu), rv_gpu = rv_cpu.to(kGpu);
  Tensor y_cpu = batch_norm(x, Tensor(), Tensor(), rm_cpu, rv_cpu, true, 1.0, 1e-5);
  Tensor y_gpu = batch_norm(x.to(kGpu), Tensor(), Tensor(), rm_gpu, rv_gpu, true, 1.0, 1e-5);
  // With momentum 1 the running statistics are the batch's (variance unbiased), about 1e4 and 1.
  EXPECT_LT(relative_error(rm_gpu, rm_cpu), 1e-6);
  EXPECT_LT(relative_error(rv_gpu, rv_cpu), 1e-5);
  std::vector<double> var = rv_gpu.to_double_vector();
  for (double v : var) EXPECT_NEAR(v, 1.0, 0.1);
  // y = x·scale + shift rounds at |x| = 1e4 (an ulp is 1e-3), on either device and differently
  // (the GPU may fuse the multiply-add), so y is held to the float64 result at that precision.
  Tensor y64 =
      batch_norm(x.to(DType::F64), Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5);
  EXPECT_LT(relative_error(y_gpu.to(DType::F64).to(Device::cpu()), y64), 2e-3);
  EXPECT_LT(relative_error(y_cpu.to(DType::F64), y64), 2e-3);
}

// A channel holding ±∞ or NaN: NaN statistics (the variance's clamp keeps the NaN), so NaN
// outputs and running variance for that channel, as on the CPU; the others as the CPU's.
TEST_F(BatchNormCuda, InfinityOrNanMakesItsChannelNanAsOnTheCpu) {
  FREIGHT_SKIP_WITHOUT_CUDA();
  for (double bad : {INFINITY, -INFINITY, NAN}) {
    SCOPED_TRACE("x holds " + std::to_string(bad));
    Generator gen(44);
    Tensor x = Tensor::normal({6, 3, 5, 5}, 0, 1, DType::F32, Device::cpu(), &gen);
    x.data<float>()[(4 * 3 + 2) * 25 + 7] = float(bad);
    Tensor rm_cpu = Tensor::zeros({3}), rv_cpu = Tensor::ones({3});
    Tensor rm_gpu = rm_cpu.to(kGpu), rv_gpu = rv_cpu.to(kGpu);
    Tensor y_cpu = batch_norm(x, Tensor(), Tensor(), rm_cpu, rv_cpu, true, 0.1, 1e-5);
    Tensor y_gpu = batch_norm(x.to(kGpu), Tensor(), Tensor(), rm_gpu, rv_gpu, true, 0.1, 1e-5);
    std::vector<double> a = y_gpu.to_double_vector(), b = y_cpu.to_double_vector();
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      const bool bad_channel = (i / 25) % 3 == 2;
      EXPECT_EQ(std::isnan(a[i]), bad_channel) << "element " << i << ": " << a[i];
      EXPECT_EQ(std::isnan(b[i]), bad_channel) << "element " << i << " on the CPU: " << b[i];
      if (!bad_channel) EXPECT_NEAR(a[i], b[i], 1e-4) << "element " << i;
    }
    std::vector<double> v = rv_gpu.to_double_vector();
    EXPECT_TRUE(std::isnan(v[2])) << "running variance " << v[2];
    EXPECT_TRUE(std::isfinite(v[0]) && std::isfinite(v[1]));
  }
}

}  // namespace
}  // namespace freight::test
