// Helpers for the CUDA kernel tests: run a function of tensors on the CPU and on the GPU and
// compare the outputs and the gradients. Every test using them skips without a GPU.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "common/test_util.h"
#include "freight/freight.h"

namespace freight::test {

using TensorFn = std::function<Tensor(const std::vector<Tensor>&)>;

// Sets NaN poisoning of fresh allocations for the lifetime of a test (an element a kernel
// forgets to write stays NaN and fails the comparison).
class CudaPoisonedTest : public ::testing::Test {
 protected:
  void SetUp() override { set_poison_allocations(true); }
  void TearDown() override { set_poison_allocations(false); }
};

inline bool any_nan(const Tensor& t) {
  for (double v : t.to_double_vector())
    if (std::isnan(v)) return true;
  return false;
}

// Bitwise equality of two tensors' values (NaN equal to NaN).
inline bool same_values(const Tensor& a, const Tensor& b) {
  std::vector<double> x = a.to_double_vector(), y = b.to_double_vector();
  if (a.shape() != b.shape()) return false;
  for (size_t i = 0; i < x.size(); ++i)
    if (!(x[i] == y[i] || (std::isnan(x[i]) && std::isnan(y[i])))) return false;
  return true;
}

// Runs `f` on the CPU inputs and on copies on the GPU: the outputs must agree (relative error
// below `tol`, or bit for bit when `exact`), and so must the gradients of every floating input
// under L = Σ out ⊙ R for a fixed random R (when `grads`). NaN in a GPU result fails unless the
// CPU has it in the same place (`exact`). Float32 results (not `exact`) are measured against a
// float64 CPU run of `f` when `f` takes float64, within float32_error_bound; float64 results
// against the CPU within float64_error_bound, from a float32 CPU run of `f` (test_util.h).
inline void expect_cuda_matches_cpu(const std::string& what, const std::vector<Tensor>& inputs,
                                    const TensorFn& f, double tol = 1e-4, bool exact = false,
                                    bool grads = true) {
  SCOPED_TRACE(what);
  const Device gpu_device = Device::cuda(0);
  // `ref` is the other precision's CPU run: float64 for float32 inputs and the reverse.
  std::vector<Tensor> cpu, gpu, ref;
  for (const Tensor& t : inputs) {
    Tensor c = t.detach().clone(), g = t.detach().to(gpu_device);
    Tensor r = t.dtype() == DType::F32   ? t.detach().to(DType::F64)
               : t.dtype() == DType::F64 ? t.detach().to(DType::F32)
                                         : t.detach().clone();
    if (grads && is_floating(t.dtype())) {
      c.set_requires_grad(true);
      g.set_requires_grad(true);
      r.set_requires_grad(true);
    }
    cpu.push_back(c);
    gpu.push_back(g);
    ref.push_back(r);
  }
  Tensor out_cpu = f(cpu), out_gpu = f(gpu);
  // The other precision's run, for results compared within a tolerance.
  const bool f32 = out_cpu.dtype() == DType::F32, f64 = out_cpu.dtype() == DType::F64;
  Tensor out_ref;
  if (!exact && (f32 || f64)) {
    try {
      out_ref = f(ref);
    } catch (const std::exception&) {  // `f` takes one precision only: the plain comparison
    }
    if (out_ref.defined() && out_ref.dtype() != (f32 ? DType::F64 : DType::F32)) out_ref = Tensor();
  }
  // error(gpu, cpu, ref): the GPU's error and the bound it must stay below.
  auto error = [&](const Tensor& g, const Tensor& c, const Tensor& r) {
    if (!r.defined()) return std::pair{relative_error(g, c), tol};
    if (f32) return std::pair{relative_error(g, r), float32_error_bound(tol, c, r)};
    return std::pair{relative_error(g, c), float64_error_bound(tol, r, c)};
  };
  ASSERT_EQ(out_gpu.device(), gpu_device);
  ASSERT_EQ(out_gpu.shape(), out_cpu.shape());
  ASSERT_EQ(out_gpu.dtype(), out_cpu.dtype());
  if (exact) {
    EXPECT_TRUE(same_values(out_gpu, out_cpu)) << "forward differs from the CPU";
  } else {
    EXPECT_FALSE(any_nan(out_gpu)) << "an output element was not written";
    auto [e, bound] = error(out_gpu, out_cpu, out_ref);
    EXPECT_LT(e, bound) << "forward";
  }
  if (!grads) return;
  Generator gen(77);
  Tensor r = Tensor::normal(out_cpu.shape(), 0, 1, out_cpu.dtype(), Device::cpu(), &gen);
  sum(mul(out_cpu, r)).backward();
  sum(mul(out_gpu, r.to(gpu_device))).backward();
  if (out_ref.defined()) sum(mul(out_ref, r.to(out_ref.dtype()))).backward();
  for (size_t i = 0; i < cpu.size(); ++i) {
    if (!cpu[i].requires_grad()) continue;
    ASSERT_TRUE(gpu[i].grad().defined()) << "no gradient for input " << i;
    if (exact) {
      EXPECT_TRUE(same_values(gpu[i].grad(), cpu[i].grad())) << "gradient of input " << i;
    } else {
      EXPECT_FALSE(any_nan(gpu[i].grad()))
          << "a gradient element of input " << i << " was not written";
      auto [e, bound] =
          error(gpu[i].grad(), cpu[i].grad(), out_ref.defined() ? ref[i].grad() : Tensor());
      EXPECT_LT(e, bound) << "gradient of input " << i;
    }
  }
}

}  // namespace freight::test
