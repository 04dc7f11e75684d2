// Op table entries: max_pool2d, relu_max_pool2d (a ReLU fused before it), max_pool2d_relu (one
// fused after it), avg_pool2d and relu_avg_pool2d with default and explicit strides, padding,
// non-square and overlapping windows, 3-D and 4-D inputs.
#include <algorithm>
#include <numeric>

#include "ops/op_table.h"
#include "ops/reference.h"

namespace freight::test {
namespace {

struct PoolArgs {
  Pair kernel, stride{0, 0}, padding{0, 0};
};

enum class Pool { Max, ReluMax, MaxRelu, Avg, ReluAvg };

// The naive pooling: for every output pixel, scan the window over the padded plane (padding
// never wins a maximum and adds zeros to an average over all kh·kw positions). ReluMax and
// ReluAvg read relu(x); MaxRelu writes relu of the maximum.
Tensor ref_pool(const Tensor& x, const PoolArgs& a, Pool kind) {
  const bool max = kind == Pool::Max || kind == Pool::ReluMax || kind == Pool::MaxRelu;
  const Shape& s = x.shape();
  int64_t H = s[s.size() - 2], W = s.back();
  int64_t planes = x.numel() / (H * W);
  int64_t kh = a.kernel[0], kw = a.kernel[1];
  int64_t sh = a.stride[0] ? a.stride[0] : kh, sw = a.stride[1] ? a.stride[1] : kw;
  int64_t OH = (H + 2 * a.padding[0] - kh) / sh + 1, OW = (W + 2 * a.padding[1] - kw) / sw + 1;
  std::vector<double> v = ref::values(x), out;
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t i = 0; i < OH; ++i)
      for (int64_t j = 0; j < OW; ++j) {
        double acc = max ? -INFINITY : 0.0;
        for (int64_t r = 0; r < kh; ++r)
          for (int64_t c = 0; c < kw; ++c) {
            int64_t ih = i * sh - a.padding[0] + r, iw = j * sw - a.padding[1] + c;
            if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
            double e = v[(p * H + ih) * W + iw];
            if (kind == Pool::ReluMax || kind == Pool::ReluAvg) e = std::max(e, 0.0);
            acc = max ? std::max(acc, e) : acc + e;
          }
        if (kind == Pool::MaxRelu) acc = std::max(acc, 0.0);
        out.push_back(max ? acc : acc / double(kh * kw));
      }
  Shape os = s;
  os[os.size() - 2] = OH;
  os.back() = OW;
  return ref::tensor(out, os);
}

// Distinct values 0.01 apart in random order: no ties in a window and no maximum that a
// finite-difference step (1e-6) could displace.
Inputs distinct_inputs(const std::vector<Shape>& shapes, DType dtype, Generator& gen) {
  Inputs in;
  for (const Shape& s : shapes) {
    std::vector<double> key =
        Tensor::uniform(s, 0, 1, DType::F64, Device::cpu(), &gen).to_double_vector();
    std::vector<int64_t> order(key.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return key[a] < key[b]; });
    std::vector<double> v(key.size());
    for (size_t r = 0; r < order.size(); ++r)
      v[order[r]] = 0.01 * double(r) - 0.005 * double(v.size());
    in.push_back(Tensor::from_vector(v, s).to(dtype));
  }
  return in;
}

// The same values moved off the grid by 0.0025: about half are negative, none is within a
// finite-difference step of relu's kink at 0.
Inputs distinct_off_zero_inputs(const std::vector<Shape>& shapes, DType dtype, Generator& gen) {
  Inputs in = distinct_inputs(shapes, dtype, gen);
  for (Tensor& t : in) t = add_scalar(t, 0.0025);
  return in;
}

OpCase pool_case(std::string name, Pool kind, std::vector<std::vector<Shape>> shapes, PoolArgs a,
                 std::vector<std::vector<Shape>> bench = {}) {
  OpCase c;
  c.name = std::move(name);
  c.shapes = std::move(shapes);
  c.forward = [a, kind](const Inputs& in) {
    switch (kind) {
      case Pool::Max:
        return max_pool2d(in[0], a.kernel, a.stride, a.padding);
      case Pool::ReluMax:
        return relu_max_pool2d(in[0], a.kernel, a.stride, a.padding);
      case Pool::MaxRelu:
        return max_pool2d_relu(in[0], a.kernel, a.stride, a.padding);
      case Pool::ReluAvg:
        return relu_avg_pool2d(in[0], a.kernel, a.stride, a.padding);
      case Pool::Avg:
        break;
    }
    return avg_pool2d(in[0], a.kernel, a.stride, a.padding);
  };
  c.reference = [a, kind](const Inputs& in) { return ref_pool(in[0], a, kind); };
  if (kind == Pool::Max) c.make_inputs = distinct_inputs;
  if (kind == Pool::ReluMax || kind == Pool::MaxRelu || kind == Pool::ReluAvg)
    c.make_inputs = distinct_off_zero_inputs;
  c.f32_atol = 1e-5;
  c.flops = [a](const std::vector<Shape>& s) {  // one operation per window element
    return double(shape_numel(s[0])) * double(a.kernel[0] * a.kernel[1]) /
           double((a.stride[0] ? a.stride[0] : a.kernel[0]) *
                  (a.stride[1] ? a.stride[1] : a.kernel[1]));
  };
  c.bench_shapes = std::move(bench);
  return c;
}

FREIGHT_OP_CASES({
    pool_case("max_pool2d", Pool::Max, {{{2, 3, 6, 6}}, {{1, 2, 5, 7}}, {{3, 4, 4}}}, {{2, 2}},
              {{{64, 32, 24, 24}}, {{64, 6, 28, 28}}}),
    pool_case("max_pool2d_3x3_s2_pad", Pool::Max, {{{2, 2, 7, 7}}, {{1, 3, 8, 6}}},
              {{3, 3}, {2, 2}, {1, 1}}),
    // Rows of more than 16 outputs (AVX-512's own path takes 16 at a time): 19 and 17 a row.
    pool_case("max_pool2d_3x3_s2_pad_wide", Pool::Max, {{{2, 2, 9, 37}}, {{1, 3, 6, 34}}},
              {{3, 3}, {2, 2}, {1, 1}}, {{{64, 32, 32, 32}}}),
    pool_case("relu_max_pool2d_3x3_s2_pad_wide", Pool::ReluMax, {{{2, 2, 7, 35}}},
              {{3, 3}, {2, 2}, {1, 1}}, {{{64, 32, 32, 32}}}),
    // AlexNet-CIFAR's first pooling, followed by its ReLU.
    pool_case("max_pool2d_relu_3x3_s2_pad_wide", Pool::MaxRelu, {{{2, 2, 7, 35}}, {{1, 3, 8, 6}}},
              {{3, 3}, {2, 2}, {1, 1}}, {{{64, 32, 32, 32}}}),
    pool_case("max_pool2d_relu", Pool::MaxRelu, {{{2, 3, 6, 6}}, {{1, 2, 5, 7}}}, {{2, 2}}),
    pool_case("max_pool2d_relu_rect_overlap", Pool::MaxRelu, {{{2, 2, 5, 7}}},
              {{2, 3}, {1, 2}, {1, 1}}),
    pool_case("max_pool2d_overlap", Pool::Max, {{{2, 2, 5, 6}}}, {{3, 3}, {1, 1}, {0, 0}},
              {{{16, 32, 24, 24}}}),
    pool_case("max_pool2d_rect", Pool::Max, {{{2, 2, 5, 7}}}, {{2, 3}, {1, 2}, {1, 1}}),
    pool_case("relu_max_pool2d", Pool::ReluMax, {{{2, 3, 6, 6}}, {{1, 2, 5, 7}}}, {{2, 2}},
              {{{64, 32, 24, 24}}}),
    pool_case("relu_max_pool2d_overlap_pad", Pool::ReluMax, {{{2, 2, 7, 7}}, {{1, 3, 6, 5}}},
              {{3, 3}, {1, 1}, {1, 1}}, {{{16, 32, 24, 24}}}),
    pool_case("avg_pool2d", Pool::Avg, {{{2, 3, 6, 6}}, {{1, 2, 5, 7}}, {{3, 4, 4}}}, {{2, 2}},
              {{{64, 6, 28, 28}}}),
    pool_case("avg_pool2d_3x3_s2_pad", Pool::Avg, {{{2, 2, 7, 7}}, {{1, 3, 8, 6}}},
              {{3, 3}, {2, 2}, {1, 1}}),
    pool_case("avg_pool2d_rect_overlap", Pool::Avg, {{{2, 2, 5, 7}}}, {{2, 3}, {1, 2}, {1, 1}}),
    pool_case("avg_pool2d_global", Pool::Avg, {{{2, 4, 8, 8}}}, {{8, 8}}),
    pool_case("relu_avg_pool2d", Pool::ReluAvg, {{{2, 3, 6, 6}}, {{1, 2, 5, 7}}}, {{2, 2}},
              {{{64, 6, 28, 28}}}),
    pool_case("relu_avg_pool2d_3x3_s2_pad", Pool::ReluAvg, {{{2, 2, 7, 7}}, {{1, 3, 8, 6}}},
              {{3, 3}, {2, 2}, {1, 1}}, {{{64, 32, 16, 16}}}),
    pool_case("relu_avg_pool2d_rect_overlap", Pool::ReluAvg, {{{2, 2, 5, 7}}},
              {{2, 3}, {1, 2}, {1, 1}}),
});

}  // namespace
}  // namespace freight::test
