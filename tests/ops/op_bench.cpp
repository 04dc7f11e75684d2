// Google Benchmark over the op table: for each case and each of its bench shapes (or test
// shapes), time forward alone and forward + backward, reporting GFLOP/s (from the case's flop
// count, forward only) and GB/s (bytes of inputs and output touched once).
//
//   build/tests/freight_op_bench --benchmark_filter=linear
//
// Benchmarks must state which BLAS kernels ran: the context line prints build_info(), which
// names OpenBLAS's core type (OPENBLAS_CORETYPE=Haswell would force AVX2 kernels).
#include <benchmark/benchmark.h>

#include "freight/freight.h"
#include "ops/op_table.h"

namespace freight::test {
namespace {

std::string shape_label(const std::vector<Shape>& shapes) {
  std::string s;
  for (const Shape& x : shapes) s += (s.empty() ? "" : "x") + shape_str(x);
  return s;
}

void run_case(benchmark::State& state, const OpCase* c, std::vector<Shape> shapes, bool backward) {
  Generator gen(1);
  Inputs in = make_case_inputs(*c, shapes, DType::F32, gen);
  std::vector<int> which = backward ? grad_input_indices(*c, in) : std::vector<int>{};
  for (int i : which) in[i].set_requires_grad(true);
  double bytes = 0;
  for (const Tensor& t : in)
    if (t.defined()) bytes += double(t.nbytes());
  Tensor out = c->forward(in);
  bytes += double(out.nbytes());
  Tensor seed = Tensor::ones(out.shape(), out.dtype());
  for (auto _ : state) {
    if (backward) {
      Tensor y = c->forward(in);
      y.backward(seed);
      for (int i : which) in[i].zero_grad();
    } else {
      NoGradGuard no_grad;
      Tensor y = c->forward(in);
      benchmark::DoNotOptimize(y.data_ptr());
    }
  }
  if (c->flops) {
    double f = c->flops(shapes) * (backward ? 3.0 : 1.0);  // backward ≈ 2× forward for GEMMs
    state.counters["GFLOP/s"] =
        benchmark::Counter(f * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  }
  state.counters["GB/s"] =
      benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

int register_all() {
  benchmark::AddCustomContext("freight", build_info());
  for (const OpCase& c : op_cases()) {
    const auto& sets = c.bench_shapes.empty() ? c.shapes : c.bench_shapes;
    for (const auto& shapes : sets) {
      std::string label = c.name + "/" + shape_label(shapes);
      benchmark::RegisterBenchmark((label + "/forward").c_str(), run_case, &c, shapes, false);
      if (!grad_input_indices(c, make_case_inputs(c, shapes, DType::F32, *new Generator(0)))
               .empty())
        benchmark::RegisterBenchmark((label + "/forward+backward").c_str(), run_case, &c, shapes,
                                     true);
    }
  }
  return 0;
}

}  // namespace
}  // namespace freight::test

int main(int argc, char** argv) {
  freight::test::register_all();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
