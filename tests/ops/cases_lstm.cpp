// Op table entries: lstm_layer. The table's forward returns one tensor, so there is one entry
// per output (output, h_n, c_n) and entries that concatenate all three, so that the gradient
// reaching each output is checked separately and together, with and without initial states and
// biases.
#include "ops/op_table.h"
#include "ops/reference.h"

namespace freight::test {
namespace {

enum class Out { Output, Hn, Cn, All };

// Which optional operands an entry passes; the inputs vector holds only the present ones, in
// the order x, [h0, c0], w_ih, w_hh, [b_ih, b_hh].
struct Variant {
  bool state = true;
  bool bias = true;
};

struct Operands {
  Tensor x, h0, c0, w_ih, w_hh, b_ih, b_hh;
};

Operands unpack(const Inputs& in, Variant v) {
  Operands o;
  size_t k = 0;
  o.x = in[k++];
  if (v.state) {
    o.h0 = in[k++];
    o.c0 = in[k++];
  }
  o.w_ih = in[k++];
  o.w_hh = in[k++];
  if (v.bias) {
    o.b_ih = in[k++];
    o.b_hh = in[k++];
  }
  return o;
}

// Input shapes for batch B, steps T, input size I, hidden size H.
std::vector<Shape> lstm_shapes(int64_t B, int64_t T, int64_t I, int64_t H, Variant v) {
  std::vector<Shape> s{{B, T, I}};
  if (v.state) {
    s.push_back({B, H});
    s.push_back({B, H});
  }
  s.push_back({4 * H, I});
  s.push_back({4 * H, H});
  if (v.bias) {
    s.push_back({4 * H});
    s.push_back({4 * H});
  }
  return s;
}

Tensor pick(const LstmResult& r, Out which) {
  switch (which) {
    case Out::Output:
      return r.output;
    case Out::Hn:
      return r.h_n;
    case Out::Cn:
      return r.c_n;
    case Out::All:
      return cat({reshape(r.output, {-1}), reshape(r.h_n, {-1}), reshape(r.c_n, {-1})}, 0);
  }
  return Tensor();
}

double sigmoid_ref(double v) {
  return 1.0 / (1.0 + std::exp(-v));
}

// Naive LSTM in double: plain loops over time, batch, gates and units.
Tensor ref_lstm(const Inputs& in, Variant v, Out which) {
  Operands o = unpack(in, v);
  const int64_t B = o.x.size(0), T = o.x.size(1), I = o.x.size(2), H = o.w_hh.size(1);
  std::vector<double> x = ref::values(o.x), wi = ref::values(o.w_ih), wh = ref::values(o.w_hh);
  std::vector<double> bi = v.bias ? ref::values(o.b_ih) : std::vector<double>(4 * H, 0.0);
  std::vector<double> bh = v.bias ? ref::values(o.b_hh) : std::vector<double>(4 * H, 0.0);
  std::vector<double> h = v.state ? ref::values(o.h0) : std::vector<double>(B * H, 0.0);
  std::vector<double> c = v.state ? ref::values(o.c0) : std::vector<double>(B * H, 0.0);
  std::vector<double> out(B * T * H);
  for (int64_t t = 0; t < T; ++t) {
    std::vector<double> h_new(B * H), c_new(B * H);
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t j = 0; j < H; ++j) {
        double pre[4];  // gates i, f, g, o for unit j
        for (int64_t q = 0; q < 4; ++q) {
          int64_t row = q * H + j;
          double acc = bi[row] + bh[row];
          for (int64_t k = 0; k < I; ++k) acc += wi[row * I + k] * x[(b * T + t) * I + k];
          for (int64_t k = 0; k < H; ++k) acc += wh[row * H + k] * h[b * H + k];
          pre[q] = acc;
        }
        double ig = sigmoid_ref(pre[0]), fg = sigmoid_ref(pre[1]);
        double gg = std::tanh(pre[2]), og = sigmoid_ref(pre[3]);
        c_new[b * H + j] = fg * c[b * H + j] + ig * gg;
        h_new[b * H + j] = og * std::tanh(c_new[b * H + j]);
        out[(b * T + t) * H + j] = h_new[b * H + j];
      }
    }
    h = h_new;
    c = c_new;
  }
  switch (which) {
    case Out::Output:
      return ref::tensor(out, {B, T, H});
    case Out::Hn:
      return ref::tensor(h, {B, H});
    case Out::Cn:
      return ref::tensor(c, {B, H});
    case Out::All: {
      std::vector<double> all = out;
      all.insert(all.end(), h.begin(), h.end());
      all.insert(all.end(), c.begin(), c.end());
      return ref::tensor(all, {int64_t(all.size())});
    }
  }
  return Tensor();
}

// x, h0, c0 ~ N(0, 1); weights and biases ~ N(0, 0.5²), so that the gates are neither all
// saturated nor all linear.
Inputs lstm_inputs(const std::vector<Shape>& shapes, DType dtype, Generator& gen, Variant v) {
  Inputs in;
  size_t n_data = v.state ? 3 : 1;
  for (size_t k = 0; k < shapes.size(); ++k)
    in.push_back(Tensor::normal(shapes[k], 0, k < n_data ? 1.0 : 0.5, dtype, Device::cpu(), &gen));
  return in;
}

OpCase lstm_case(const std::string& name, Out which, Variant v) {
  OpCase c;
  c.name = name;
  c.shapes = {lstm_shapes(2, 3, 4, 5, v), lstm_shapes(3, 1, 2, 3, v), lstm_shapes(1, 4, 3, 2, v)};
  c.forward = [v, which](const Inputs& in) {
    Operands o = unpack(in, v);
    return pick(lstm_layer(o.x, o.h0, o.c0, o.w_ih, o.w_hh, o.b_ih, o.b_hh), which);
  };
  c.reference = [v, which](const Inputs& in) { return ref_lstm(in, v, which); };
  c.make_inputs = [v](const std::vector<Shape>& s, DType dt, Generator& g) {
    return lstm_inputs(s, dt, g, v);
  };
  // The float32 cell uses vectorised exp/tanh approximations (a few ulp), compounded over steps.
  c.f32_rtol = 2e-5;
  c.f32_atol = 2e-6;
  // Forward FLOPs: the input and recurrent projections, 2·B·T·4H·(I + H).
  c.flops = [v](const std::vector<Shape>& s) {
    double B = double(s[0][0]), T = double(s[0][1]), I = double(s[0][2]);
    double H = double(s[v.state ? 4 : 2][1]);
    return 2.0 * B * T * 4.0 * H * (I + H);
  };
  c.bench_shapes = {lstm_shapes(64, 28, 28, 128, v), lstm_shapes(64, 32, 256, 256, v)};
  return c;
}

FREIGHT_OP_CASES({
    lstm_case("lstm_layer_output", Out::Output, {}),
    lstm_case("lstm_layer_h_n", Out::Hn, {}),
    lstm_case("lstm_layer_c_n", Out::Cn, {}),
    lstm_case("lstm_layer_all", Out::All, {}),
    lstm_case("lstm_layer_output_no_state", Out::Output, {.state = false}),
    lstm_case("lstm_layer_all_no_state", Out::All, {.state = false}),
    lstm_case("lstm_layer_all_no_bias", Out::All, {.bias = false}),
});

}  // namespace
}  // namespace freight::test
