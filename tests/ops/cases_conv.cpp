// Op table entries: conv2d with and without bias, strides, padding, dilation, non-square and
// 1x1 kernels, and conv2d_relu (a ReLU fused into its output). The reference is the direct
// seven-loop sum over (n, o, i, j, c, p, q).
#include "ops/op_table.h"
#include "ops/reference.h"

namespace freight::test {
namespace {

struct ConvArgs {
  Pair stride{1, 1}, padding{0, 0}, dilation{1, 1};
};

Tensor ref_conv2d(const Tensor& x, const Tensor& w, const Tensor& b, const ConvArgs& a) {
  int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  int64_t O = w.size(0), KH = w.size(2), KW = w.size(3);
  int64_t OH = (H + 2 * a.padding[0] - a.dilation[0] * (KH - 1) - 1) / a.stride[0] + 1;
  int64_t OW = (W + 2 * a.padding[1] - a.dilation[1] * (KW - 1) - 1) / a.stride[1] + 1;
  std::vector<double> vx = ref::values(x), vw = ref::values(w);
  std::vector<double> vb = b.defined() ? ref::values(b) : std::vector<double>(O, 0.0);
  std::vector<double> out(N * O * OH * OW);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t i = 0; i < OH; ++i)
        for (int64_t j = 0; j < OW; ++j) {
          double acc = vb[o];
          for (int64_t c = 0; c < C; ++c)
            for (int64_t p = 0; p < KH; ++p)
              for (int64_t q = 0; q < KW; ++q) {
                int64_t ih = i * a.stride[0] - a.padding[0] + p * a.dilation[0];
                int64_t iw = j * a.stride[1] - a.padding[1] + q * a.dilation[1];
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                acc += vx[((n * C + c) * H + ih) * W + iw] * vw[((o * C + c) * KH + p) * KW + q];
              }
          out[((n * O + o) * OH + i) * OW + j] = acc;
        }
  return ref::tensor(out, {N, O, OH, OW});
}

// Forward floating-point operations (a multiply and an add per weight tap and output pixel).
double conv_flops(const std::vector<Shape>& s, const ConvArgs& a) {
  const Shape& x = s[0];
  const Shape& w = s[1];
  int64_t OH = (x[2] + 2 * a.padding[0] - a.dilation[0] * (w[2] - 1) - 1) / a.stride[0] + 1;
  int64_t OW = (x[3] + 2 * a.padding[1] - a.dilation[1] * (w[3] - 1) - 1) / a.stride[1] + 1;
  return 2.0 * double(x[0] * w[0] * OH * OW) * double(w[1] * w[2] * w[3]);
}

OpCase conv_case(std::string name, std::vector<std::vector<Shape>> shapes, ConvArgs a,
                 std::vector<std::vector<Shape>> bench = {}, bool relu = false) {
  OpCase c;
  c.name = std::move(name);
  c.shapes = std::move(shapes);
  c.forward = [a, relu](const Inputs& in) {
    return (relu ? conv2d_relu : conv2d)(in[0], in[1], in.size() > 2 ? in[2] : Tensor(), a.stride,
                                         a.padding, a.dilation);
  };
  c.reference = [a, relu](const Inputs& in) {
    Tensor y = ref_conv2d(in[0], in[1], in.size() > 2 ? in[2] : Tensor(), a);
    if (!relu) return y;
    std::vector<double> v = ref::values(y);
    for (double& e : v) e = e > 0 ? e : 0;
    return ref::tensor(v, y.shape());
  };
  c.f32_rtol = 1e-4;
  c.f32_atol = 1e-5;
  c.flops = [a](const std::vector<Shape>& s) { return conv_flops(s, a); };
  c.bench_shapes = std::move(bench);
  return c;
}

FREIGHT_OP_CASES({
    // 3x3, stride 1, no padding; one image, several images (grouped GEMM), non-square input.
    conv_case("conv2d",
              {{{1, 2, 5, 5}, {3, 2, 3, 3}, {3}},
               {{3, 3, 6, 5}, {4, 3, 3, 3}, {4}},
               {{5, 1, 4, 7}, {2, 1, 3, 2}, {2}}},
              {},
              {{{64, 1, 28, 28}, {32, 1, 3, 3}, {32}}, {{64, 32, 26, 26}, {64, 32, 3, 3}, {64}}}),
    conv_case("conv2d_no_bias", {{{2, 3, 5, 6}, {2, 3, 3, 3}}, {{4, 2, 4, 4}, {3, 2, 2, 2}}}, {}),
    conv_case("conv2d_pad",
              {{{2, 2, 5, 5}, {3, 2, 3, 3}, {3}},   // "same" 3x3
               {{3, 1, 6, 6}, {2, 1, 5, 5}, {2}}},  // LeNet's first layer in small
              {{1, 1}, {1, 1}, {1, 1}}, {{{64, 16, 32, 32}, {16, 16, 3, 3}, {16}}}),
    conv_case("conv2d_pad2_5x5", {{{3, 1, 6, 6}, {2, 1, 5, 5}, {2}}}, {{1, 1}, {2, 2}, {1, 1}},
              {{{64, 1, 28, 28}, {6, 1, 5, 5}, {6}}}),
    conv_case("conv2d_stride2",
              {{{2, 2, 7, 7}, {3, 2, 3, 3}, {3}}, {{3, 3, 8, 6}, {2, 3, 3, 3}, {2}}},
              {{2, 2}, {1, 1}, {1, 1}}, {{{64, 16, 32, 32}, {32, 16, 3, 3}, {32}}}),
    conv_case("conv2d_stride_pad_asym", {{{2, 2, 7, 9}, {3, 2, 3, 2}, {3}}},
              {{2, 3}, {1, 2}, {1, 1}}),
    conv_case("conv2d_dilation",
              {{{2, 2, 7, 8}, {2, 2, 3, 3}, {2}}, {{1, 1, 9, 9}, {2, 1, 2, 3}, {2}}},
              {{1, 1}, {1, 2}, {2, 3}}),
    conv_case("conv2d_dilation_stride", {{{2, 2, 9, 9}, {2, 2, 3, 3}, {2}}},
              {{2, 2}, {2, 2}, {2, 2}}),
    conv_case("conv2d_1x1", {{{3, 4, 3, 5}, {2, 4, 1, 1}, {2}}}, {}),
    // ResNet's shortcut: 1x1 with stride 2.
    conv_case("conv2d_1x1_stride2", {{{3, 4, 5, 6}, {3, 4, 1, 1}, {3}}}, {{2, 2}, {0, 0}, {1, 1}},
              {{{64, 16, 32, 32}, {32, 16, 1, 1}, {32}}}),
    conv_case("conv2d_1x1_pad", {{{2, 2, 3, 3}, {2, 2, 1, 1}, {2}}}, {{1, 1}, {1, 1}, {1, 1}}),
    // Kernel as large as the padded input: a single output pixel.
    conv_case("conv2d_full_kernel", {{{2, 2, 3, 4}, {3, 2, 5, 4}, {3}}}, {{1, 1}, {1, 0}, {1, 1}}),
    // Many images with a tiny feature map (several images per GEMM group).
    conv_case("conv2d_many_images", {{{9, 3, 3, 3}, {4, 3, 2, 2}, {4}}}, {{1, 1}, {1, 1}, {1, 1}}),
    // The fused ReLU: MNIST-CNN's first layer in small (stride 1, no padding), with padding and
    // stride 2, 1x1, and without a bias.
    conv_case("conv2d_relu", {{{3, 1, 6, 6}, {4, 1, 3, 3}, {4}}, {{2, 3, 6, 5}, {5, 3, 3, 3}, {5}}},
              {}, {{{64, 1, 28, 28}, {32, 1, 3, 3}, {32}}}, true),
    conv_case("conv2d_relu_stride2_pad",
              {{{2, 2, 7, 7}, {3, 2, 3, 3}, {3}}, {{3, 3, 8, 6}, {2, 3, 3, 3}}},
              {{2, 2}, {1, 1}, {1, 1}}, {}, true),
    conv_case("conv2d_relu_1x1", {{{3, 4, 3, 5}, {2, 4, 1, 1}, {2}}}, {}, {}, true),
});

}  // namespace
}  // namespace freight::test
