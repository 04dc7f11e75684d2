#include "ops/op_table.h"

#include <fmt/format.h>

namespace freight::test {

std::vector<OpCase>& op_cases() {
  static std::vector<OpCase> cases;
  return cases;
}

OpCaseRegistrar::OpCaseRegistrar(std::vector<OpCase> cases) {
  for (auto& c : cases) op_cases().push_back(std::move(c));
}

const OpCase& find_op_case(const std::string& name) {
  for (const OpCase& c : op_cases())
    if (c.name == name) return c;
  throw Error(fmt::format("no op case named '{}'", name));
}

Inputs normal_inputs(const std::vector<Shape>& shapes, DType dtype, Generator& gen) {
  Inputs in;
  for (const Shape& s : shapes) in.push_back(Tensor::normal(s, 0, 1, dtype, Device::cpu(), &gen));
  return in;
}

Inputs make_case_inputs(const OpCase& c, const std::vector<Shape>& shapes, DType dtype,
                        Generator& gen) {
  return c.make_inputs ? c.make_inputs(shapes, dtype, gen) : normal_inputs(shapes, dtype, gen);
}

std::vector<int> grad_input_indices(const OpCase& c, const Inputs& inputs) {
  if (c.has_grad_inputs || !c.grad_inputs.empty()) return c.grad_inputs;
  std::vector<int> idx;
  for (int i = 0; i < int(inputs.size()); ++i)
    if (inputs[i].defined() && is_floating(inputs[i].dtype())) idx.push_back(i);
  return idx;
}

}  // namespace freight::test
