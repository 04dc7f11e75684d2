// Op table entries: matmul (2-D, batched, N-D @ 2-D) and linear.
#include "ops/op_table.h"
#include "ops/reference.h"

namespace freight::test {
namespace {

// Naive triple loop: [b?, m, k] @ [b?, k, n].
Tensor ref_matmul(const Tensor& a, const Tensor& b) {
  bool batched = a.dim() == 3 && b.dim() == 3;
  int64_t batch = batched ? a.size(0) : 1;
  int64_t k = a.size(-1), n = b.size(-1);
  int64_t m = a.numel() / (batch * k);
  std::vector<double> va = ref::values(a), vb = ref::values(b), out(batch * m * n, 0.0);
  for (int64_t p = 0; p < batch; ++p)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (int64_t l = 0; l < k; ++l)
          acc += va[(p * m + i) * k + l] * vb[(batched ? p * k * n : 0) + l * n + j];
        out[(p * m + i) * n + j] = acc;
      }
  Shape s = a.shape();
  s.back() = n;
  return ref::tensor(out, s);
}

// x[..., in] · w[out, in]ᵀ + b.
Tensor ref_linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  int64_t in = w.size(1), out_f = w.size(0), rows = x.numel() / in;
  std::vector<double> vx = ref::values(x), vw = ref::values(w), out(rows * out_f);
  std::vector<double> vb = b.defined() ? ref::values(b) : std::vector<double>(out_f, 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out_f; ++o) {
      double acc = vb[o];
      for (int64_t i = 0; i < in; ++i) acc += vx[r * in + i] * vw[o * in + i];
      out[r * out_f + o] = acc;
    }
  Shape s = x.shape();
  s.back() = out_f;
  return ref::tensor(out, s);
}

double gemm_flops(const std::vector<Shape>& s) {
  // 2·m·n·k per batch.
  const Shape& a = s[0];
  const Shape& b = s[1];
  double batch_m = double(shape_numel(a)) / double(a.back());
  return 2.0 * batch_m * double(a.back()) * double(b.back());
}

FREIGHT_OP_CASES({
    [] {
      OpCase c;
      c.name = "matmul_2d";
      c.shapes = {{{3, 4}, {4, 5}}, {{1, 7}, {7, 2}}, {{6, 1}, {1, 3}}};
      c.forward = [](const Inputs& in) { return matmul(in[0], in[1]); };
      c.reference = [](const Inputs& in) { return ref_matmul(in[0], in[1]); };
      c.flops = gemm_flops;
      c.bench_shapes = {{{64, 784}, {784, 512}}, {{1024, 1024}, {1024, 1024}}};
      return c;
    }(),
    [] {
      OpCase c;
      c.name = "matmul_batched";
      c.shapes = {{{2, 3, 4}, {2, 4, 5}}};
      c.forward = [](const Inputs& in) { return matmul(in[0], in[1]); };
      c.reference = [](const Inputs& in) { return ref_matmul(in[0], in[1]); };
      c.flops = gemm_flops;
      return c;
    }(),
    [] {
      OpCase c;
      c.name = "matmul_nd_2d";
      c.shapes = {{{2, 3, 4}, {4, 5}}};
      c.forward = [](const Inputs& in) { return matmul(in[0], in[1]); };
      c.reference = [](const Inputs& in) { return ref_matmul(in[0], in[1]); };
      return c;
    }(),
    [] {
      OpCase c;
      c.name = "linear";
      c.shapes = {{{4, 5}, {3, 5}, {3}}, {{2, 3, 6}, {4, 6}, {4}}, {{1, 8}, {1, 8}, {1}}};
      c.forward = [](const Inputs& in) { return linear(in[0], in[1], in[2]); };
      c.reference = [](const Inputs& in) { return ref_linear(in[0], in[1], in[2]); };
      c.flops = [](const std::vector<Shape>& s) {
        return 2.0 * double(shape_numel(s[0])) * double(s[1][0]);
      };
      c.bench_shapes = {{{64, 784}, {512, 784}, {512}}, {{256, 512}, {256, 512}, {256}}};
      return c;
    }(),
    [] {
      OpCase c;
      c.name = "linear_no_bias";
      c.shapes = {{{4, 5}, {3, 5}}};
      c.forward = [](const Inputs& in) { return linear(in[0], in[1]); };
      c.reference = [](const Inputs& in) { return ref_linear(in[0], in[1], Tensor()); };
      return c;
    }(),
});

}  // namespace
}  // namespace freight::test
