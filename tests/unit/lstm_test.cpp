// lstm_layer beyond the op table: error messages, a stacked pair of layers under a gradient
// check, agreement with the same LSTM written with elementwise ops on batches large enough for
// the CPU kernels to split the batch across threads, and agreement between the two ways the op
// can run the recurrence (the whole-sequence kernels, or its own step loop over the cell
// kernels, which is what a device without sequence kernels gets).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <optional>
#include <string>

#include "common/test_util.h"
#include "freight/freight.h"
#include "ops/kernels/lstm.h"

namespace freight {
namespace {

struct Layer {
  Tensor w_ih, w_hh, b_ih, b_hh;
};

Layer make_layer(int64_t I, int64_t H, DType dt, Generator& g, double std = 0.5) {
  auto n = [&](Shape s) { return Tensor::normal(s, 0, std, dt, Device::cpu(), &g); };
  return {n({4 * H, I}), n({4 * H, H}), n({4 * H}), n({4 * H})};
}

LstmResult run(const Tensor& x, const Tensor& h0, const Tensor& c0, const Layer& l) {
  return lstm_layer(x, h0, c0, l.w_ih, l.w_hh, l.b_ih, l.b_hh);
}

// The same LSTM composed of linear, sigmoid, tanh, mul and add, one step at a time.
LstmResult composite_lstm(const Tensor& x, Tensor h, Tensor c, const Layer& l) {
  int64_t H = l.w_hh.size(1);
  std::vector<Tensor> outs;
  for (int64_t t = 0; t < x.size(1); ++t) {
    Tensor a = add(linear(select(x, 1, t), l.w_ih, l.b_ih), linear(h, l.w_hh, l.b_hh));
    Tensor i = sigmoid(slice(a, 1, 0, H)), f = sigmoid(slice(a, 1, H, 2 * H));
    Tensor g = tanh(slice(a, 1, 2 * H, 3 * H)), o = sigmoid(slice(a, 1, 3 * H, 4 * H));
    c = add(mul(f, c), mul(i, g));
    h = mul(o, tanh(c));
    outs.push_back(h);
  }
  return {stack(outs, 1), h, c};
}

// Σ output⊙r0 + Σ h_n⊙r1 + Σ c_n⊙r2: a loss that sends a gradient into every output.
Tensor loss_of(const LstmResult& r, const std::vector<Tensor>& w) {
  return add(add(sum(mul(r.output, w[0])), sum(mul(r.h_n, w[1]))), sum(mul(r.c_n, w[2])));
}

std::vector<Tensor> loss_weights(const LstmResult& r, Generator& g) {
  std::vector<Tensor> w;
  for (const Tensor& t : {r.output, r.h_n, r.c_n})
    w.push_back(Tensor::normal(t.shape(), 0, 1, t.dtype(), Device::cpu(), &g));
  return w;
}

void expect_error(const std::function<void()>& f, const std::vector<std::string>& fragments) {
  try {
    f();
    ADD_FAILURE() << "no error thrown";
  } catch (const Error& e) {
    std::string msg = e.what();
    for (const std::string& s : fragments)
      EXPECT_NE(msg.find(s), std::string::npos) << "'" << s << "' missing from: " << msg;
  }
}

TEST(Lstm, ShapeErrorsNameTheOpAndTheShapes) {
  Generator g(1);
  Layer l = make_layer(4, 5, DType::F32, g);
  Tensor x = Tensor::zeros({2, 3, 4});
  Tensor s = Tensor::zeros({2, 5});
  expect_error([&] { run(Tensor::zeros({3, 4}), s, s, l); }, {"lstm_layer", "[3, 4]"});
  expect_error(
      [&] {
        run(Tensor::zeros({2, 3, 6}), s, s, l);
      },
      {"lstm_layer", "w_ih", "[20, 4]", "[2, 3, 6]"});
  expect_error(
      [&] {
        lstm_layer(x, s, s, Tensor::zeros({18, 4}), l.w_hh, l.b_ih, l.b_hh);
      },
      {"lstm_layer", "w_ih", "[18, 4]"});
  expect_error(
      [&] {
        lstm_layer(x, s, s, l.w_ih, Tensor::zeros({20, 4}), l.b_ih, l.b_hh);
      },
      {"lstm_layer", "w_hh", "[20, 4]", "[20, 5]"});
  expect_error([&] { lstm_layer(x, s, s, l.w_ih, l.w_hh, Tensor::zeros({5}), l.b_hh); },
               {"lstm_layer", "b_ih", "[5]", "[20]"});
  expect_error([&] { lstm_layer(x, s, s, l.w_ih, l.w_hh, l.b_ih, Tensor::zeros({21})); },
               {"lstm_layer", "b_hh", "[21]", "[20]"});
  expect_error(
      [&] {
        run(x, Tensor::zeros({3, 5}), s, l);
      },
      {"lstm_layer", "h0", "[3, 5]", "[2, 5]"});
  expect_error(
      [&] {
        run(x, s, Tensor::zeros({2, 4}), l);
      },
      {"lstm_layer", "c0", "[2, 4]", "[2, 5]"});
  expect_error([&] { run(Tensor::zeros({2, 0, 4}), s, s, l); }, {"lstm_layer", "[2, 0, 4]"});
  expect_error(
      [&] {
        run(Tensor::zeros({2, 3, 4}, DType::F64), s, s, l);
      },
      {"lstm_layer", "dtypes", "float64", "float32"});
  expect_error(
      [&] {
        run(Tensor::zeros({2, 3, 4}, DType::I64), s, s, l);
      },
      {"lstm_layer", "floating"});
}

// Two layers, the second fed the first's output: every gradient against central differences.
TEST(Lstm, TwoLayerStackPassesGradientCheck) {
  Generator g(2);
  const int64_t B = 2, T = 3, I = 3, H1 = 4, H2 = 3;
  Tensor x = Tensor::normal({B, T, I}, 0, 1, DType::F64, Device::cpu(), &g);
  Tensor h0 = Tensor::normal({B, H1}, 0, 1, DType::F64, Device::cpu(), &g);
  Tensor c0 = Tensor::normal({B, H2}, 0, 1, DType::F64, Device::cpu(), &g);
  Layer l1 = make_layer(I, H1, DType::F64, g), l2 = make_layer(H1, H2, DType::F64, g);
  std::vector<Tensor> params{x,  h0,      l1.w_ih, l1.w_hh, l1.b_ih, l1.b_hh,
                             c0, l2.w_ih, l2.w_hh, l2.b_ih, l2.b_hh};
  for (Tensor& p : params) p.set_requires_grad(true);
  auto forward = [&] {
    LstmResult r1 = run(x, h0, Tensor(), l1);
    return run(r1.output, Tensor(), c0, l2);  // layer 1 without c0, layer 2 without h0
  };
  LstmResult r = forward();
  std::vector<Tensor> w = loss_weights(r, g);
  loss_of(r, w).backward();
  NoGradGuard no_grad;
  const double eps = 1e-6;
  for (size_t k = 0; k < params.size(); ++k) {
    ASSERT_TRUE(params[k].grad().defined()) << "parameter " << k;
    std::vector<double> analytic = params[k].grad().to_double_vector();
    double* v = params[k].data<double>();
    for (int64_t e = 0; e < params[k].numel(); ++e) {
      double saved = v[e];
      v[e] = saved + eps;
      double lp = loss_of(forward(), w).item();
      v[e] = saved - eps;
      double lm = loss_of(forward(), w).item();
      v[e] = saved;
      double numeric = (lp - lm) / (2 * eps);
      EXPECT_NEAR(analytic[e], numeric, 1e-7 + 1e-5 * std::fabs(numeric))
          << "parameter " << k << " element " << e;
    }
  }
}

// Compares lstm_layer with composite_lstm, forward and every gradient. The batch is large
// enough (and odd) that the CPU kernels split it unevenly across two threads.
void check_against_composite(DType dt, int64_t B, int64_t T, int64_t I, int64_t H, bool state,
                             double tol) {
  int saved_threads = num_threads();
  set_num_threads(2);
  Generator g(3);
  Tensor x = Tensor::normal({B, T, I}, 0, 1, dt, Device::cpu(), &g);
  Tensor h0, c0;
  if (state) {
    h0 = Tensor::normal({B, H}, 0, 1, dt, Device::cpu(), &g);
    c0 = Tensor::normal({B, H}, 0, 1, dt, Device::cpu(), &g);
  }
  Tensor zeros = Tensor::zeros({B, H}, dt);
  Layer l = make_layer(I, H, dt, g, 0.3);
  std::vector<Tensor> ins{x, h0, c0, l.w_ih, l.w_hh, l.b_ih, l.b_hh};
  std::vector<Tensor> got_grads, want_grads;
  LstmResult got, want;
  for (int pass = 0; pass < 2; ++pass) {
    for (Tensor& t : ins)
      if (t.defined()) t.zero_grad(), t.set_requires_grad(true);
    LstmResult r = pass == 0 ? run(x, h0, c0, l)
                             : composite_lstm(x, state ? h0 : zeros, state ? c0 : zeros, l);
    Generator wg(4);
    loss_of(r, loss_weights(r, wg)).backward();
    (pass == 0 ? got : want) = r;
    for (Tensor& t : ins)
      (pass == 0 ? got_grads : want_grads).push_back(t.defined() ? t.grad() : t);
  }
  set_num_threads(saved_threads);
  EXPECT_LT(test::relative_error(got.output, want.output), tol);
  EXPECT_LT(test::relative_error(got.h_n, want.h_n), tol);
  EXPECT_LT(test::relative_error(got.c_n, want.c_n), tol);
  for (size_t k = 0; k < ins.size(); ++k) {
    if (!ins[k].defined()) continue;
    ASSERT_TRUE(got_grads[k].defined()) << "input " << k;
    EXPECT_LT(test::relative_error(got_grads[k], want_grads[k]), tol) << "gradient of input " << k;
  }
}

TEST(Lstm, MatchesCompositeOpsOnASplitBatchFloat64) {
  check_against_composite(DType::F64, 19, 4, 5, 6, true, 1e-12);
  check_against_composite(DType::F64, 33, 2, 3, 4, false, 1e-12);
}

// Float32 runs the CPU's register-blocked kernels: tiles of every height, hidden sizes that fill
// their panels exactly or leave partial ones, and a batch large enough for streamed stores.
TEST(Lstm, MatchesCompositeOpsOnASplitBatchFloat32) {
  check_against_composite(DType::F32, 64, 6, 28, 32, true, 2e-5);
  check_against_composite(DType::F32, 21, 3, 5, 50, true, 2e-5);
  check_against_composite(DType::F32, 13, 4, 3, 40, false, 2e-5);
  check_against_composite(DType::F32, 64, 2, 8, 256, true, 2e-5);
}

// Only some inputs require gradients (the usual first layer: x is data; here also w_ih and the
// biases frozen): the gradients that are computed match those of a run where all are.
TEST(Lstm, GradientsOfSomeInputsMatchThoseOfAFullRun) {
  for (DType dt : {DType::F32, DType::F64}) {
    Generator g(9);
    const int64_t B = 40, T = 3, I = 6, H = 20;
    Tensor x = Tensor::normal({B, T, I}, 0, 1, dt, Device::cpu(), &g);
    Tensor h0 = Tensor::normal({B, H}, 0, 1, dt, Device::cpu(), &g);
    Layer l = make_layer(I, H, dt, g);
    std::vector<Tensor> ins{x, h0, l.w_ih, l.w_hh, l.b_ih, l.b_hh};
    std::vector<std::vector<Tensor>> grads(2);
    for (int pass = 0; pass < 2; ++pass) {
      for (size_t k = 0; k < ins.size(); ++k) {
        ins[k].zero_grad();
        bool frozen = pass == 1 && (k == 0 || k == 2 || k == 4 || k == 5);
        ins[k].set_requires_grad(!frozen);
      }
      LstmResult r = run(x, h0, Tensor(), l);
      Generator wg(10);
      loss_of(r, loss_weights(r, wg)).backward();
      for (Tensor& t : ins) grads[pass].push_back(t.grad());
    }
    for (size_t k : {0, 2, 4, 5}) EXPECT_FALSE(grads[1][k].defined()) << "input " << k;
    for (size_t k : {1, 3}) {
      ASSERT_TRUE(grads[1][k].defined()) << "input " << k;
      EXPECT_LT(test::relative_error(grads[1][k], grads[0][k]), 1e-6) << "input " << k;
    }
  }
}

// Removes the CPU whole-sequence kernels while alive, so that the op runs its own step loop.
class WithoutSequenceKernels {
 public:
  WithoutSequenceKernels()
      : fwd_(kernels::lstm_sequence_forward.get(DeviceType::CPU)),
        bwd_(kernels::lstm_sequence_backward.get(DeviceType::CPU)) {
    kernels::lstm_sequence_forward.set(DeviceType::CPU, nullptr);
    kernels::lstm_sequence_backward.set(DeviceType::CPU, nullptr);
  }
  ~WithoutSequenceKernels() {
    kernels::lstm_sequence_forward.set(DeviceType::CPU, fwd_);
    kernels::lstm_sequence_backward.set(DeviceType::CPU, bwd_);
  }

 private:
  decltype(kernels::lstm_sequence_forward)::Fn fwd_;
  decltype(kernels::lstm_sequence_backward)::Fn bwd_;
};

TEST(Lstm, StepLoopOverCellKernelsMatchesSequenceKernels) {
  for (int64_t B : {1, 3, 11, 40}) {
    for (bool state : {true, false}) {
      Generator g(5);
      Tensor x = Tensor::normal({B, 5, 7}, 0, 1, DType::F32, Device::cpu(), &g);
      Tensor h0, c0;
      if (state) {
        h0 = Tensor::normal({B, 9}, 0, 1, DType::F32, Device::cpu(), &g);
        c0 = Tensor::normal({B, 9}, 0, 1, DType::F32, Device::cpu(), &g);
      }
      Layer l = make_layer(7, 9, DType::F32, g);
      std::vector<Tensor> ins{x, h0, c0, l.w_ih, l.w_hh, l.b_ih, l.b_hh};
      std::vector<std::vector<Tensor>> grads(2);
      std::vector<LstmResult> res(2);
      for (int pass = 0; pass < 2; ++pass) {
        std::optional<WithoutSequenceKernels> generic;
        if (pass == 1) generic.emplace();
        for (Tensor& t : ins)
          if (t.defined()) t.zero_grad(), t.set_requires_grad(true);
        res[pass] = run(x, h0, c0, l);
        Generator wg(6);
        loss_of(res[pass], loss_weights(res[pass], wg)).backward();
        for (Tensor& t : ins) grads[pass].push_back(t.defined() ? t.grad() : t);
      }
      EXPECT_LT(test::relative_error(res[1].output, res[0].output), 1e-6) << "B " << B;
      EXPECT_LT(test::relative_error(res[1].c_n, res[0].c_n), 1e-6) << "B " << B;
      for (size_t k = 0; k < ins.size(); ++k) {
        if (!ins[k].defined()) continue;
        EXPECT_LT(test::relative_error(grads[1][k], grads[0][k]), 1e-5)
            << "B " << B << " gradient of input " << k;
      }
    }
  }
  // The guard really reaches the slots the library uses: without the cell kernel as well, the
  // op must fail loudly.
  WithoutSequenceKernels generic;
  auto cell = kernels::lstm_cell_forward.get(DeviceType::CPU);
  kernels::lstm_cell_forward.set(DeviceType::CPU, nullptr);
  Generator g(7);
  Layer l = make_layer(2, 3, DType::F32, g);
  expect_error(
      [&] {
        run(Tensor::zeros({1, 2, 2}), Tensor(), Tensor(), l);
      },
      {"lstm_cell_forward", "cpu"});
  kernels::lstm_cell_forward.set(DeviceType::CPU, cell);
}

// A NaN or an infinity in the input or the initial state flows through the kernels as through
// the composite: NaN from its step on for that sample alone (sigmoid and tanh of a NaN are NaN,
// as in PyTorch), the other samples untouched. Float32 runs the register-blocked kernels (tiles
// of every height, a partial panel), with and without the tape.
TEST(Lstm, NanAndInfinityFlowAsInTheComposite) {
  for (int64_t H : {16, 40}) {
    for (bool recording : {true, false}) {
      Generator g(11);
      const int64_t B = 13, T = 5, I = 4;
      Tensor x = Tensor::normal({B, T, I}, 0, 1, DType::F32, Device::cpu(), &g);
      Tensor h0 = Tensor::normal({B, H}, 0, 1, DType::F32, Device::cpu(), &g);
      Tensor c0 = Tensor::normal({B, H}, 0, 1, DType::F32, Device::cpu(), &g);
      float* px = x.data<float>();
      px[(0 * T + 1) * I + 2] = std::nanf("");
      px[(2 * T + 3) * I + 0] = INFINITY;
      px[(7 * T + 0) * I + 1] = -INFINITY;
      h0.data<float>()[5 * H + 3] = std::nanf("");
      c0.data<float>()[9 * H + 1] = INFINITY;
      Layer l = make_layer(I, H, DType::F32, g, 0.3);
      if (recording)
        for (Tensor* t : {&x, &l.w_ih, &l.w_hh}) t->set_requires_grad(true);
      std::optional<NoGradGuard> no_grad;
      if (!recording) no_grad.emplace();
      LstmResult got = run(x, h0, c0, l), want = composite_lstm(x, h0, c0, l);
      for (auto [a, b] :
           {std::pair{got.output, want.output}, {got.h_n, want.h_n}, {got.c_n, want.c_n}}) {
        std::vector<float> va = a.to_float_vector(), vb = b.to_float_vector();
        ASSERT_EQ(va.size(), vb.size());
        int nans = 0;
        for (size_t i = 0; i < va.size(); ++i) {
          ASSERT_EQ(std::isnan(va[i]), std::isnan(vb[i])) << "H " << H << ", element " << i;
          nans += std::isnan(va[i]);
          if (std::isinf(vb[i])) {
            EXPECT_EQ(va[i], vb[i]) << "H " << H << ", element " << i;
          } else if (!std::isnan(vb[i])) {
            EXPECT_NEAR(va[i], vb[i], 1e-4) << "H " << H << ", element " << i;
          }
        }
        EXPECT_GT(nans, 0);
      }
      // Sample 1 met nothing: all finite; sample 0 is NaN from step 1 on.
      std::vector<float> out = got.output.to_float_vector();
      for (int64_t t = 0; t < T; ++t)
        for (int64_t j = 0; j < H; ++j) {
          EXPECT_TRUE(std::isfinite(out[(1 * T + t) * H + j]));
          EXPECT_EQ(std::isnan(out[(0 * T + t) * H + j]), t >= 1) << "t " << t << ", unit " << j;
        }
    }
  }
}

TEST(Lstm, RecordsNothingWithoutGradients) {
  Generator g(8);
  Layer l = make_layer(3, 4, DType::F32, g);
  for (Tensor* t : {&l.w_ih, &l.w_hh, &l.b_ih, &l.b_hh}) t->set_requires_grad(true);
  Tensor x = Tensor::normal({2, 3, 3}, 0, 1, DType::F32, Device::cpu(), &g);
  LstmResult with = run(x, Tensor(), Tensor(), l);
  EXPECT_STREQ(grad_fn_name(with.output), "lstm_layer");
  EXPECT_STREQ(grad_fn_name(with.c_n), "lstm_layer");
  NoGradGuard no_grad;
  LstmResult without = run(x, Tensor(), Tensor(), l);
  EXPECT_FALSE(without.output.requires_grad());
  EXPECT_EQ(without.output.to_float_vector(), with.output.to_float_vector());
  EXPECT_EQ(without.h_n.to_float_vector(), with.h_n.to_float_vector());
}

}  // namespace
}  // namespace freight
