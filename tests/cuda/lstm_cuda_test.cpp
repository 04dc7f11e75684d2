// LSTM on CUDA beyond the op table: the two cell kernels called directly against the CPU's (both
// precisions, odd sizes, poisoned outputs), and whole layers in float64, with and without
// initial states and biases, every gradient compared. Skips without a GPU.
#include <gtest/gtest.h>

#include "cuda/cuda_compare.h"
#include "freight/freight.h"
#include "ops/kernels/lstm.h"

namespace freight::test {
namespace {

const Device kGpu = Device::cuda(0);

using LstmCuda = CudaPoisonedTest;

TEST_F(LstmCuda, CellKernelsMatchTheCpu) {
  FREIGHT_SKIP_WITHOUT_CUDA();
  for (DType dt : {DType::F32, DType::F64}) {
    for (auto [B, H] : {std::pair<int64_t, int64_t>{1, 1}, {3, 5}, {17, 33}, {2, 300}}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " B " + std::to_string(B) + " H " +
                   std::to_string(H));
      const double tol = dt == DType::F32 ? 1e-5 : 1e-12;
      Generator gen(50);
      auto normal = [&](Shape s, double std) {
        return Tensor::normal(s, 0, std, dt, Device::cpu(), &gen);
      };
      Tensor pre = normal({B, 4 * H}, 2), bias = normal({4 * H}, 1), c_prev = normal({B, H}, 1);
      // Forward on both devices (gates is updated in place: pre-activations in, activations out).
      Tensor gates_cpu = pre.clone(), c_cpu = Tensor::empty({B, H}, dt),
             h_cpu = Tensor::empty({B, H}, dt);
      kernels::lstm_cell_forward(DeviceType::CPU, gates_cpu, bias, c_prev, c_cpu, h_cpu);
      Tensor gates_gpu = pre.to(kGpu), c_gpu = Tensor::empty({B, H}, dt, kGpu),
             h_gpu = Tensor::empty({B, H}, dt, kGpu);
      kernels::lstm_cell_forward(DeviceType::CUDA, gates_gpu, bias.to(kGpu), c_prev.to(kGpu), c_gpu,
                                 h_gpu);
      EXPECT_LT(relative_error(gates_gpu, gates_cpu), tol) << "activations";
      EXPECT_LT(relative_error(c_gpu, c_cpu), tol) << "c";
      EXPECT_LT(relative_error(h_gpu, h_cpu), tol) << "h";
      EXPECT_FALSE(any_nan(gates_gpu) || any_nan(c_gpu) || any_nan(h_gpu));
      // Backward from the CPU's activations, so both devices start from the same values.
      Tensor dh_out = normal({B, H}, 1), dh_next = normal({B, H}, 1), dc0 = normal({B, H}, 1);
      Tensor dc_cpu = dc0.clone(), dg_cpu = Tensor::empty({B, 4 * H}, dt);
      kernels::lstm_cell_backward(DeviceType::CPU, gates_cpu, c_prev, c_cpu, dh_out, dh_next,
                                  dc_cpu, dg_cpu);
      Tensor dc_gpu = dc0.to(kGpu), dg_gpu = Tensor::empty({B, 4 * H}, dt, kGpu);
      kernels::lstm_cell_backward(DeviceType::CUDA, gates_cpu.to(kGpu), c_prev.to(kGpu),
                                  c_cpu.to(kGpu), dh_out.to(kGpu), dh_next.to(kGpu), dc_gpu,
                                  dg_gpu);
      EXPECT_LT(relative_error(dg_gpu, dg_cpu), tol) << "dgates";
      EXPECT_LT(relative_error(dc_gpu, dc_cpu), tol) << "dc_prev";
      EXPECT_FALSE(any_nan(dg_gpu) || any_nan(dc_gpu));
    }
  }
}

TEST_F(LstmCuda, LayersMatchTheCpuInFloat64) {
  FREIGHT_SKIP_WITHOUT_CUDA();
  struct Case {
    int64_t B, T, I, H;
    bool states, biases;
  };
  for (const Case& c : {Case{1, 1, 1, 1, false, true}, Case{3, 5, 4, 7, true, true},
                        Case{5, 9, 3, 6, false, false}, Case{2, 4, 11, 3, true, false}}) {
    Generator gen(51);
    const DType dt = DType::F64;
    auto u = [&](Shape s) { return Tensor::uniform(s, -0.5, 0.5, dt, Device::cpu(), &gen); };
    std::vector<Tensor> in = {u({c.B, c.T, c.I}), u({4 * c.H, c.I}), u({4 * c.H, c.H})};
    if (c.biases) in.push_back(u({4 * c.H})), in.push_back(u({4 * c.H}));
    if (c.states) in.push_back(u({c.B, c.H})), in.push_back(u({c.B, c.H}));
    const std::string what = "B " + std::to_string(c.B) + " T " + std::to_string(c.T) + " I " +
                             std::to_string(c.I) + " H " + std::to_string(c.H) +
                             (c.states ? " with states" : "") + (c.biases ? " with biases" : "");
    const bool biases = c.biases, states = c.states;
    // Output, h_n and c_n all reach the loss (h_n and c_n through the concatenated result).
    TensorFn f = [biases, states](const std::vector<Tensor>& v) {
      size_t k = 3;
      Tensor b_ih = biases ? v[k++] : Tensor(), b_hh = biases ? v[k++] : Tensor();
      Tensor h0 = states ? v[k++] : Tensor(), c0 = states ? v[k++] : Tensor();
      LstmResult r = lstm_layer(v[0], h0, c0, v[1], v[2], b_ih, b_hh);
      return add(sum(r.output), add(sum(square(r.h_n)), sum(mul(r.c_n, r.c_n))));
    };
    expect_cuda_matches_cpu(what, in, f, 1e-10);
    std::vector<Tensor> in32;
    for (const Tensor& t : in) in32.push_back(t.to(DType::F32));
    expect_cuda_matches_cpu(what + " float32", in32, f, 1e-4);
  }
}

}  // namespace
}  // namespace freight::test
