// Every entry of the op table on non-contiguous inputs (input_layouts.h): the same values as the
// packed run, laid out transposed or strided, must give the same outputs and input gradients.
//
// On the CPU the comparison is bit for bit, in float32 and float64: an op either packs a view
// before its kernel runs (Tensor::contiguous, the rule of docs/internals.md) or indexes it
// through its strides, and either way it adds the same numbers in the same order as on the
// packed input. On a GPU the laid-out run is held to the packed CudaMatchesCpu bounds against
// the CPU's float64 run.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>

#include "common/test_util.h"
#include "ops/input_layouts.h"
#include "ops/op_table.h"

namespace freight::test {
namespace {

constexpr Layout kViews[] = {Layout::Transposed, Layout::Strided};

std::vector<std::string> case_names() {
  std::vector<std::string> names;
  for (const OpCase& c : op_cases()) names.push_back(c.name);
  return names;
}

class OpLayouts : public ::testing::TestWithParam<std::string> {
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

// Floating inputs converted to `dtype` (packed, on the CPU); integer inputs as they are.
Inputs cast_floating(const Inputs& in, DType dtype) {
  Inputs out;
  for (const Tensor& t : in) out.push_back(t.defined() && is_floating(t.dtype()) ? t.to(dtype) : t);
  return out;
}

// One run of a case: its output and the gradients of the checked inputs under L = Σ out ⊙ R.
struct CaseRun {
  Tensor out;
  std::vector<Tensor> grads;
};

// R is drawn from `gen` by the first run (float32 values, exact in float64) and reused after.
CaseRun run_case(const OpCase& c, Inputs in, const std::vector<int>& which, Tensor& r,
                 Generator& gen) {
  for (int i : which) in[i].set_requires_grad(true);
  CaseRun run;
  run.out = c.forward(in);
  if (which.empty() || !is_floating(run.out.dtype())) return run;
  if (!r.defined()) r = Tensor::normal(run.out.shape(), 0, 1, DType::F32, Device::cpu(), &gen);
  sum(mul(run.out, r.to(run.out.dtype()).to(run.out.device()))).backward();
  for (int i : which) run.grads.push_back(in[i].grad());
  return run;
}

// Same shape and the same bits in every element (float32 widened to double exactly).
::testing::AssertionResult identical(const Tensor& got, const Tensor& want) {
  if (!got.defined() || !want.defined())
    return ::testing::AssertionFailure() << (got.defined() ? "expected" : "got") << " is undefined";
  if (got.shape() != want.shape())
    return ::testing::AssertionFailure()
           << "shape " << shape_str(got.shape()) << ", expected " << shape_str(want.shape());
  std::vector<double> a = got.to_double_vector(), b = want.to_double_vector();
  size_t differ = 0, first = 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::bit_cast<uint64_t>(a[i]) != std::bit_cast<uint64_t>(b[i]) && differ++ == 0) first = i;
  if (differ == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << differ << " of " << a.size() << " elements differ; the first, element " << first << ": "
         << fmt::format("{:.17g} instead of {:.17g}", a[first], b[first]);
}

// The helper itself: each layout holds the values it was given and is not packed in memory.
TEST(InputLayouts, ViewsHoldTheValuesWithoutBeingPacked) {
  Generator gen(3);
  Tensor x = Tensor::normal({3, 4}, 0, 1, DType::F64, Device::cpu(), &gen);
  Tensor labels = Tensor::randint({5}, 0, 7, Device::cpu(), &gen);
  for (Layout layout : kViews) {
    SCOPED_TRACE(layout_name(layout));
    Tensor v = lay_out(x, layout, Device::cpu());
    EXPECT_FALSE(v.is_contiguous());
    EXPECT_TRUE(identical(v, x));
    EXPECT_EQ(lay_out(labels, layout, Device::cpu()).to_int_vector(), labels.to_int_vector());
  }
  EXPECT_EQ(lay_out(x, Layout::Transposed, Device::cpu()).strides(), (Shape{1, 3}));
  EXPECT_EQ(lay_out(x, Layout::Strided, Device::cpu()).strides(), (Shape{8, 2}));
  EXPECT_FALSE(lay_out(labels, Layout::Strided, Device::cpu()).is_contiguous());
  EXPECT_TRUE(lay_out(labels, Layout::Transposed, Device::cpu()).is_contiguous());  // rank 1
}

TEST_P(OpLayouts, NonContiguousInputsMatchPackedBitForBit) {
  const OpCase& c = op();
  Generator gen(15);
  for (DType dtype : {DType::F64, DType::F32}) {
    for (const auto& shapes : c.shapes) {
      // The case's maker draws the values (integers, positive values, values off kinks); the
      // views are built from them.
      Inputs base = cast_floating(make_case_inputs(c, shapes, DType::F64, gen), dtype);
      std::vector<int> which = grad_input_indices(c, base);
      Tensor r;
      CaseRun packed = run_case(c, lay_out_all(base, Layout::Packed, Device::cpu()), which, r, gen);
      for (Layout layout : kViews) {
        std::string where = fmt::format("{} {}, {} inputs, shapes {}", c.name, dtype_name(dtype),
                                        layout_name(layout), describe(shapes));
        CaseRun viewed = run_case(c, lay_out_all(base, layout, Device::cpu()), which, r, gen);
        EXPECT_TRUE(identical(viewed.out, packed.out)) << where << ": forward";
        ASSERT_EQ(viewed.grads.size(), packed.grads.size()) << where;
        for (size_t k = 0; k < which.size() && k < packed.grads.size(); ++k)
          EXPECT_TRUE(identical(viewed.grads[k], packed.grads[k]))
              << where << ": gradient of input " << which[k];
      }
    }
  }
}

TEST_P(OpLayouts, CudaMatchesCpuOnNonContiguousInputs) {
  FREIGHT_SKIP_WITHOUT_CUDA();
  const OpCase& c = op();
  Generator gen(16);
  for (const auto& shapes : c.shapes) {
    Inputs base = make_case_inputs(c, shapes, DType::F32, gen);
    std::vector<int> which = grad_input_indices(c, base);
    // The packed CPU runs: float64 the reference, float32 how well float32 can do on these inputs.
    Tensor r;
    CaseRun ref =
        run_case(c, lay_out_all(cast_floating(base, DType::F64), Layout::Packed, Device::cpu()),
                 which, r, gen);
    CaseRun cpu = run_case(c, lay_out_all(base, Layout::Packed, Device::cpu()), which, r, gen);
    for (Layout layout : kViews) {
      for (DType dtype : {DType::F32, DType::F64}) {
        std::string where = fmt::format("{} {} on the GPU, {} inputs, shapes {}", c.name,
                                        dtype_name(dtype), layout_name(layout), describe(shapes));
        auto bound = [&](const Tensor& cpu_f32, const Tensor& cpu_f64) {
          return dtype == DType::F32 ? float32_error_bound(c.cuda_rel_tol, cpu_f32, cpu_f64)
                                     : float64_error_bound(c.cuda_rel_tol, cpu_f32, cpu_f64);
        };
        CaseRun gpu = run_case(c, lay_out_all(cast_floating(base, dtype), layout, Device::cuda()),
                               which, r, gen);
        ASSERT_EQ(gpu.out.device(), Device::cuda()) << where << ": returned a CPU tensor";
        EXPECT_LT(relative_error(gpu.out, ref.out), bound(cpu.out, ref.out))
            << where << ": forward; the float32 CPU's own error is "
            << relative_error(cpu.out, ref.out);
        ASSERT_EQ(gpu.grads.size(), ref.grads.size()) << where;
        for (size_t k = 0; k < gpu.grads.size(); ++k)
          EXPECT_LT(relative_error(gpu.grads[k], ref.grads[k]), bound(cpu.grads[k], ref.grads[k]))
              << where << ": gradient of input " << which[k] << "; the float32 CPU's own error is "
              << relative_error(cpu.grads[k], ref.grads[k]);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, OpLayouts, ::testing::ValuesIn(case_names()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace freight::test
