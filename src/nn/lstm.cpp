// LSTM: a stack of lstm_layer calls, each layer reading the previous one's hidden states.
#include "freight/nn/lstm.h"

#include <fmt/format.h>

#include "freight/error.h"
#include "freight/ops.h"
#include "nn/init.h"

namespace freight::nn {

LSTM::LSTM(int64_t input_size, int64_t hidden_size, int64_t num_layers)
    : Module("LSTM"), input_(input_size), hidden_(hidden_size), layers_(num_layers) {
  FREIGHT_CHECK(input_size > 0 && hidden_size > 0 && num_layers > 0,
                fmt::format("LSTM({}, {}, num_layers={}): sizes must be positive", input_size,
                            hidden_size, num_layers));
  // PyTorch initialises every LSTM parameter U(−1/√H, 1/√H), in registration order.
  double bound = 1.0 / std::sqrt(double(hidden_size));
  int64_t g = 4 * hidden_;  // the gates i, f, g, o stacked
  for (int64_t k = 0; k < layers_; ++k) {
    int64_t in = k == 0 ? input_ : hidden_;
    w_ih_.push_back(
        register_parameter(fmt::format("weight_ih_l{}", k), uniform_init({g, in}, bound)));
    w_hh_.push_back(
        register_parameter(fmt::format("weight_hh_l{}", k), uniform_init({g, hidden_}, bound)));
    b_ih_.push_back(register_parameter(fmt::format("bias_ih_l{}", k), uniform_init({g}, bound)));
    b_hh_.push_back(register_parameter(fmt::format("bias_hh_l{}", k), uniform_init({g}, bound)));
  }
}

std::string LSTM::describe() const {
  return layers_ == 1 ? fmt::format("LSTM({}, {})", input_, hidden_)
                      : fmt::format("LSTM({}, {}, num_layers={})", input_, hidden_, layers_);
}

void LSTM::check_input(const Shape& in) const {
  FREIGHT_CHECK(in.size() == 3 && in[2] == input_,
                fmt::format("{}: expects a batch-first sequence [B, T, {}], got {}", describe(),
                            input_, shape_str(in)));
}

Shape LSTM::output_shape(const Shape& in) const {
  check_input(in);
  return {in[0], in[1], hidden_};
}

double LSTM::flops(const Shape& in) const {
  check_input(in);
  double bt = double(in[0]) * double(in[1]), h = double(hidden_);
  double total = 0;
  for (int64_t k = 0; k < layers_; ++k) {
    double i = double(k == 0 ? input_ : hidden_);
    total += bt * (2.0 * 4 * h * (i + h) + 10 * h);
  }
  return total;
}

double LSTM::bytes(const Shape& in) const {
  check_input(in);
  double bt = double(in[0]) * double(in[1]), h = double(hidden_);
  double total = 0;
  for (int64_t k = 0; k < layers_; ++k) {
    double i = double(k == 0 ? input_ : hidden_);
    double weights = 4 * h * (i + h) + 8 * h;
    total += 4.0 * (bt * i + weights + 2.0 * bt * 4 * h + 2.0 * bt * h);
  }
  return total;
}

Tensor LSTM::forward(const Tensor& x) {
  return forward(x, Tensor(), Tensor());
}

Tensor LSTM::forward(const Tensor& x, const Tensor& h0, const Tensor& c0) {
  check_input(x.shape());
  Shape state{layers_, x.size(0), hidden_};
  for (const Tensor* s : {&h0, &c0})
    FREIGHT_CHECK(!s->defined() || s->shape() == state,
                  fmt::format("{}: initial state of shape {}, expected [num_layers, B, H] = {}",
                              describe(), shape_str(s->shape()), shape_str(state)));
  Tensor in = x;
  std::vector<Tensor> hs, cs;
  for (int64_t k = 0; k < layers_; ++k) {
    Tensor hk = h0.defined() ? h0.select(0, k) : Tensor();
    Tensor ck = c0.defined() ? c0.select(0, k) : Tensor();
    LstmResult r = lstm_layer(in, hk, ck, w_ih_[k], w_hh_[k], b_ih_[k], b_hh_[k]);
    in = r.output;
    hs.push_back(r.h_n);
    cs.push_back(r.c_n);
  }
  h_n_ = stack(hs, 0);
  c_n_ = stack(cs, 0);
  return in;
}

}  // namespace freight::nn
