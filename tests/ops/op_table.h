// The op table: one entry per op (or per variant of an op), each with the input shapes to try,
// the op as a function of its inputs, and a naive reference. The harness in op_harness_test.cpp
// runs every entry through the same checks (forward against the reference in float64 and
// float32, float64 central-difference gradients, CUDA against CPU with poisoned outputs),
// op_layouts_test.cpp runs them on transposed and strided views of the same inputs, and bench/
// times the same entries. Adding an op means adding one entry here.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "freight/freight.h"

namespace freight::test {

using Inputs = std::vector<Tensor>;

struct OpCase {
  std::string name;  // letters, digits and '_' (a test name)
  // Each entry is one set of input shapes to try (small enough for finite differences).
  std::vector<std::vector<Shape>> shapes;
  // The op under test, through the public API. Must be deterministic for fixed inputs.
  std::function<Tensor(const Inputs&)> forward;
  // Naive reference computed with plain loops in double on the CPU from float64 inputs.
  std::function<Tensor(const Inputs&)> reference;
  // Builds the inputs for one shape set on the CPU (default: N(0, 1) values of `dtype`). Use it
  // for integer inputs (labels, indices) and to keep values away from kinks (relu at 0, ties in
  // max-pooling) by more than the finite-difference step.
  std::function<Inputs(const std::vector<Shape>&, DType, Generator&)> make_inputs;
  // Which inputs get gradient checks (default: every floating input).
  std::vector<int> grad_inputs;
  bool has_grad_inputs = false;
  double f32_rtol = 1e-5, f32_atol = 1e-6;    // float32 forward vs the float64 reference
  double grad_rtol = 1e-5, grad_atol = 1e-7;  // analytic vs numeric gradients (float64)
  double cuda_rel_tol = 1e-4;  // ‖cuda − cpu‖/‖cpu‖ in float32, forward and gradients
  // Floating-point operations of one forward call for a shape set (for benchmarks; optional).
  std::function<double(const std::vector<Shape>&)> flops;
  // Larger shape sets for benchmarks (default: the test shapes).
  std::vector<std::vector<Shape>> bench_shapes;
};

std::vector<OpCase>& op_cases();
const OpCase& find_op_case(const std::string& name);

struct OpCaseRegistrar {
  explicit OpCaseRegistrar(std::vector<OpCase> cases);
};

// Default input maker: N(0, 1) floating tensors.
Inputs normal_inputs(const std::vector<Shape>& shapes, DType dtype, Generator& gen);
// Inputs built by `make_inputs` (or the default), on the CPU.
Inputs make_case_inputs(const OpCase& c, const std::vector<Shape>& shapes, DType dtype,
                        Generator& gen);
// The indices of inputs to gradient-check.
std::vector<int> grad_input_indices(const OpCase& c, const Inputs& inputs);

}  // namespace freight::test

#define FREIGHT_OP_CASES_CONCAT2(a, b) a##b
#define FREIGHT_OP_CASES_CONCAT(a, b) FREIGHT_OP_CASES_CONCAT2(a, b)
// Registers the op cases of one family file: FREIGHT_OP_CASES({case, case, ...});
#define FREIGHT_OP_CASES(...)                                      \
  static ::freight::test::OpCaseRegistrar FREIGHT_OP_CASES_CONCAT( \
      op_cases_, __LINE__)(std::vector<::freight::test::OpCase> __VA_ARGS__)
