// Runs every entry of the op table through the same checks. See op_table.h.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <random>

#include "common/test_util.h"
#include "ops/op_table.h"

namespace freight::test {
namespace {

std::vector<std::string> case_names() {
  std::vector<std::string> names;
  for (const OpCase& c : op_cases()) names.push_back(c.name);
  return names;
}

class OpTable : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { set_poison_allocations(true); }
  void TearDown() override { set_poison_allocations(false); }
  const OpCase& op() const { return find_op_case(GetParam()); }
};

std::string describe(const std::vector<Shape>& shapes) {
  std::string s;
  for (const Shape& x : shapes) s += (s.empty() ? "" : ", ") + shape_str(x);
  return s;
}

Inputs cast_all(const Inputs& in, DType dtype, Device device) {
  Inputs out;
  for (const Tensor& t : in) {
    if (!t.defined()) {
      out.push_back(t);
      continue;
    }
    Tensor c = is_floating(t.dtype()) ? t.to(dtype) : t;
    out.push_back(c.to(device));
  }
  return out;
}

// L = Σ out ⊙ R for a fixed random R: a scalar whose gradient exercises every output element.
Tensor weighted_sum(const Tensor& out, const Tensor& r) {
  return sum(mul(out, r));
}

// (L(x + eps) - L(x - eps)) / 2 eps for L = Σ out ⊙ R, with the two outputs subtracted element by
// element before the sum: outputs that the nudged input does not reach cancel exactly, so the
// rounding of a long sum (it grows with the output's size) cannot swamp the small difference.
// Summing first made log_softmax on [64, 600] miss by 3.5e-7 under clang, whose vectorised sum
// rounds in another order than gcc's.
double central_difference(const std::vector<double>& plus, const std::vector<double>& minus,
                          const std::vector<double>& r, double eps) {
  double d = 0;
  for (size_t i = 0; i < plus.size(); ++i) d += r[i] * (plus[i] - minus[i]);
  return d / (2 * eps);
}

TEST_P(OpTable, ForwardMatchesReferenceFloat64) {
  const OpCase& c = op();
  ASSERT_TRUE(c.reference) << c.name << " has no reference";
  Generator gen(11);
  for (const auto& shapes : c.shapes) {
    Inputs in = make_case_inputs(c, shapes, DType::F64, gen);
    Tensor got = c.forward(in);
    Tensor want = c.reference(in);
    EXPECT_TRUE(all_close(got, want, 1e-9, 1e-11)) << c.name << " shapes " << describe(shapes);
  }
}

TEST_P(OpTable, ForwardMatchesReferenceFloat32) {
  const OpCase& c = op();
  Generator gen(12);
  for (const auto& shapes : c.shapes) {
    Inputs in64 = make_case_inputs(c, shapes, DType::F64, gen);
    Tensor got = c.forward(cast_all(in64, DType::F32, Device::cpu()));
    if (is_floating(got.dtype())) {
      EXPECT_EQ(got.dtype(), DType::F32) << c.name;
    }
    Tensor want = c.reference(in64);
    EXPECT_TRUE(all_close(got, want, c.f32_rtol, c.f32_atol))
        << c.name << " shapes " << describe(shapes);
  }
}

TEST_P(OpTable, GradientsMatchFiniteDifferences) {
  const OpCase& c = op();
  Generator gen(13);
  for (const auto& shapes : c.shapes) {
    Inputs in = make_case_inputs(c, shapes, DType::F64, gen);
    std::vector<int> which = grad_input_indices(c, in);
    if (which.empty()) GTEST_SKIP() << c.name << " has no differentiable inputs";
    for (int i : which) in[i].set_requires_grad(true);
    Tensor out = c.forward(in);
    ASSERT_TRUE(is_floating(out.dtype()));
    Tensor r = Tensor::normal(out.shape(), 0, 1, DType::F64, Device::cpu(), &gen);
    weighted_sum(out, r).backward();

    const double eps = 1e-6;
    const std::vector<double> rv = r.to_double_vector();
    std::mt19937 pick(7);
    for (int i : which) {
      Tensor g = in[i].grad();
      ASSERT_TRUE(g.defined()) << c.name << ": no gradient reached input " << i;
      ASSERT_EQ(g.shape(), in[i].shape());
      std::vector<double> ga = g.to_double_vector();
      double* x = in[i].data<double>();
      int64_t n = in[i].numel();
      std::vector<int64_t> idx;
      if (n <= 40) {
        for (int64_t k = 0; k < n; ++k) idx.push_back(k);
      } else {
        for (int k = 0; k < 40; ++k) idx.push_back(int64_t(pick() % uint64_t(n)));
      }
      NoGradGuard no_grad;
      for (int64_t k : idx) {
        double saved = x[k];
        x[k] = saved + eps;
        // Copied out at once: a view op's output shares the input's memory.
        std::vector<double> plus = c.forward(in).to_double_vector();
        x[k] = saved - eps;
        std::vector<double> minus = c.forward(in).to_double_vector();
        x[k] = saved;
        double numeric = central_difference(plus, minus, rv, eps);
        EXPECT_NEAR(ga[k], numeric, c.grad_atol + c.grad_rtol * std::fabs(numeric))
            << c.name << " shapes " << describe(shapes) << ": d/d input " << i << " element " << k;
      }
    }
  }
}

TEST_P(OpTable, CudaMatchesCpu) {
  FREIGHT_SKIP_WITHOUT_CUDA();
  const OpCase& c = op();
  Generator gen(14);
  for (const auto& shapes : c.shapes) {
    Inputs base = make_case_inputs(c, shapes, DType::F32, gen);
    std::vector<int> which = grad_input_indices(c, base);
    // The float64 CPU run is the reference; the float32 CPU run says how well float32 can do
    // on these inputs (float32_error_bound).
    Inputs ref = cast_all(base, DType::F64, Device::cpu());
    Inputs cpu = cast_all(base, DType::F32, Device::cpu());
    Inputs gpu = cast_all(base, DType::F32, Device::cuda());
    for (int i : which) {
      ref[i].set_requires_grad(true);
      cpu[i].set_requires_grad(true);
      gpu[i].set_requires_grad(true);
    }
    Tensor out_ref = c.forward(ref);
    Tensor out_cpu = c.forward(cpu);
    Tensor out_gpu = c.forward(gpu);
    ASSERT_EQ(out_gpu.device(), Device::cuda()) << c.name << " returned a CPU tensor";
    EXPECT_LT(relative_error(out_gpu, out_ref),
              float32_error_bound(c.cuda_rel_tol, out_cpu, out_ref))
        << c.name << " forward, shapes " << describe(shapes) << "; the float32 CPU's own error is "
        << relative_error(out_cpu, out_ref);
    if (which.empty()) continue;
    Tensor r = Tensor::normal(out_cpu.shape(), 0, 1, DType::F32, Device::cpu(), &gen);
    weighted_sum(out_ref, r.to(DType::F64)).backward();
    weighted_sum(out_cpu, r).backward();
    weighted_sum(out_gpu, r.to(Device::cuda())).backward();
    for (int i : which) {
      EXPECT_LT(relative_error(gpu[i].grad(), ref[i].grad()),
                float32_error_bound(c.cuda_rel_tol, cpu[i].grad(), ref[i].grad()))
          << c.name << " gradient of input " << i << ", shapes " << describe(shapes)
          << "; the float32 CPU's own error is " << relative_error(cpu[i].grad(), ref[i].grad());
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, OpTable, ::testing::ValuesIn(case_names()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace freight::test
