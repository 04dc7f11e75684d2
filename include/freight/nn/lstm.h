// A stack of LSTM layers over batch-first sequences, with PyTorch's parameter names and layouts:
// for each layer k, weight_ih_l{k} [4H, in_k], weight_hh_l{k} [4H, H], bias_ih_l{k} [4H],
// bias_hh_l{k} [4H], gates in the order i, f, g, o, all initialised U(−1/√H, 1/√H). Layer k > 0
// reads the hidden states of layer k − 1 (in_k = H).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "freight/nn/module.h"

namespace freight::nn {

class LSTM : public Module {
 public:
  LSTM(int64_t input_size, int64_t hidden_size, int64_t num_layers = 1);
  // x [B, T, input_size] -> the last layer's hidden state at every step [B, T, H], starting
  // from zero states.
  Tensor forward(const Tensor& x) override;
  // The same from given initial states h0, c0 [num_layers, B, H] (either may be undefined).
  Tensor forward(const Tensor& x, const Tensor& h0, const Tensor& c0);
  // The final hidden and cell states of every layer, [num_layers, B, H], of the last forward
  // call (differentiable, like PyTorch's (h_n, c_n)).
  const Tensor& h_n() const { return h_n_; }
  const Tensor& c_n() const { return c_n_; }

  std::string describe() const override;
  Shape output_shape(const Shape& in) const override;
  // Per layer and step: the two GEMMs 2·B·4H·(in + H), plus about 10 elementwise operations per
  // hidden unit (bias adds, three sigmoids, two tanh, the cell and hidden updates).
  double flops(const Shape& in) const override;
  // Per layer: its input, its weights, the gate pre-activations [B, T, 4H] written and read
  // back, the hidden and cell states [B, T, H] kept for backward.
  double bytes(const Shape& in) const override;
  int64_t input_size() const { return input_; }
  int64_t hidden_size() const { return hidden_; }
  int64_t num_layers() const { return layers_; }

 private:
  void check_input(const Shape& in) const;
  int64_t input_, hidden_, layers_;
  std::vector<Tensor> w_ih_, w_hh_, b_ih_, b_hh_;  // per layer
  Tensor h_n_, c_n_;
};

}  // namespace freight::nn
