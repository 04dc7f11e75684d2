// Walks the unary op descriptors (freight/unary_ops.h) and fails when an op lacks what every op
// must have: an op-table entry that tests it, CPU (and, in a CUDA build, CUDA) kernels whose
// backward reads only what the descriptor says it keeps, and for an activation a layer, a
// model-file type and a cost rule.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "common/test_util.h"
#include "freight/explain.h"
#include "freight/freight.h"
#include "freight/nn/model_file.h"
#include "ops/kernels/elementwise.h"
#include "ops/op_table.h"

namespace freight {
namespace {

Tensor inputs_for(UnaryOp op, Generator& gen) {
  // log and sqrt need positive inputs; every op is smooth away from 0 on [0.5, 2].
  (void)op;
  return Tensor::uniform({3, 5}, 0.5, 2.0, DType::F64, Device::cpu(), &gen);
}

TEST(UnaryTable, RowsAreInEnumOrder) {
  for (size_t i = 0; i < std::size(kUnaryOps); ++i) EXPECT_EQ(size_t(kUnaryOps[i].op), i);
}

TEST(UnaryTable, EveryOpHasAnOpTableEntryThatRunsIt) {
  Generator gen(3);
  for (const UnaryOpInfo& info : kUnaryOps) {
    SCOPED_TRACE(info.name);
    const test::OpCase* c = nullptr;
    for (const test::OpCase& k : test::op_cases())
      if (k.name == info.name) c = &k;
    ASSERT_NE(c, nullptr) << "no op-table entry named '" << info.name
                          << "' (tests/ops/cases_elementwise.cpp)";
    Tensor x = inputs_for(info.op, gen);
    EXPECT_TRUE(test::all_close(c->forward({x}), unary(info.op, x), 0, 0))
        << "the op-table entry '" << info.name << "' does not run unary(UnaryOp::" << info.name
        << ")";
  }
}

// The backward kernel gets the kept tensor in the slot the descriptor names and NaN in the
// other: a rule that reads the wrong tensor (or a descriptor that names the wrong one, which
// would free the tensor the rule needs) gives NaN gradients.
void expect_backward_reads_only_what_it_keeps(Device device) {
  Generator gen(5);
  for (const UnaryOpInfo& info : kUnaryOps) {
    SCOPED_TRACE(std::string(info.name) + " on " + device.str());
    for (DType dtype : {DType::F32, DType::F64}) {
      Tensor x = inputs_for(info.op, gen).to(dtype).to(device);
      Tensor y = unary(info.op, x);
      Tensor gy = Tensor::uniform(x.shape(), -1, 1, dtype, Device::cpu(), &gen).to(device);
      Tensor nan = Tensor::full(x.shape(), std::numeric_limits<double>::quiet_NaN(), dtype, device);
      Tensor xs = info.saves == UnarySaves::Input ? x : nan;
      Tensor ys = info.saves == UnarySaves::Output ? y : nan;
      Tensor gx = Tensor::full(x.shape(), std::numeric_limits<double>::quiet_NaN(), dtype, device);
      kernels::unary_backward(device.type, info.op, xs, ys, gy, gx);
      std::vector<double> g = gx.to(Device::cpu()).to_double_vector();
      for (double v : g)
        ASSERT_TRUE(std::isfinite(v)) << "gradient reads a tensor it does not keep";
      // And it is the derivative: autograd through the op gives the same values.
      Tensor xg = x.detach().set_requires_grad(true);
      unary(info.op, xg).backward(gy);
      EXPECT_TRUE(test::all_close(xg.grad(), gx, 0, 0));
    }
  }
}

TEST(UnaryTable, EveryOpHasACpuKernelWhoseBackwardReadsWhatItKeeps) {
  ASSERT_TRUE(kernels::unary.has(DeviceType::CPU));
  ASSERT_TRUE(kernels::unary_backward.has(DeviceType::CPU));
  expect_backward_reads_only_what_it_keeps(Device::cpu());
}

TEST(UnaryTable, EveryOpHasACudaKernelWhoseBackwardReadsWhatItKeeps) {
  if (!FREIGHT_WITH_CUDA) GTEST_SKIP() << "CPU-only build";
  ASSERT_TRUE(kernels::unary.has(DeviceType::CUDA));
  ASSERT_TRUE(kernels::unary_backward.has(DeviceType::CUDA));
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  expect_backward_reads_only_what_it_keeps(Device::cuda(0));
}

TEST(UnaryTable, EveryActivationHasALayerAModelFileTypeAndACostRule) {
  for (const UnaryOpInfo& info : kUnaryOps) {
    SCOPED_TRACE(info.name);
    nn::ModulePtr layer = nn::make_activation(info.op);
    if (!info.layer) {
      EXPECT_EQ(layer, nullptr);
      continue;
    }
    ASSERT_NE(layer, nullptr);
    EXPECT_EQ(layer->type_name(), info.layer);
    EXPECT_EQ(layer->describe(), std::string(info.layer) + "()");

    // The model-file type is the op's name.
    nn::ModelSpec spec = nn::parse_model_spec(
        std::string(
            R"({"name": "t", "input": {"shape": [6]}, "classes": 6, "layers": [{"type": ")") +
            info.name + R"("}]})",
        "test");
    nn::ModulePtr model = nn::build_model(spec);
    ASSERT_EQ(model->named_children().size(), 1u);
    EXPECT_EQ(model->named_children()[0].second->type_name(), info.layer);

    // The cost rule: one FLOP per element forward, the descriptor's count backward.
    std::vector<LayerCost> costs = layer_costs(*layer, {4, 6}, true);
    ASSERT_EQ(costs.size(), 1u);
    EXPECT_EQ(costs[0].fwd_flops, 24);
    EXPECT_EQ(costs[0].bwd_flops, info.bwd_flops * 24);
    EXPECT_GT(costs[0].bwd_bytes, 0);
  }
}

}  // namespace
}  // namespace freight
