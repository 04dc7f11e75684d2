// The differentiable ops. Each one checks its operands (same device, dtypes, shapes: errors name
// the op and the shapes), runs the kernel of the operands' device, and records its backward rule
// when gradients are enabled. Semantics follow PyTorch's functions of the same names.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "freight/tensor.h"
#include "freight/unary_ops.h"

namespace freight {

class Generator;
using Pair = std::array<int64_t, 2>;  // (height, width) for convolution and pooling parameters

// ---- elementwise, with NumPy broadcasting ----
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
// relu(a + b) in one pass each way, bit-identical to the pair (no intermediate tensor; the
// backward keeps only the output, for relu's mask): what nn::Sequential runs for a Residual
// followed by a ReLU.
Tensor add_relu(const Tensor& a, const Tensor& b);
Tensor scale(const Tensor& a, double s);       // a * s
Tensor add_scalar(const Tensor& a, double s);  // a + s

// ---- unary functions and activations: one per row of freight/unary_ops.h ----
// neg, exp, log, sqrt, square; relu, sigmoid, tanh, gelu (exact form x·Φ(x), PyTorch's
// default), silu (x·σ(x)). Each is also unary(UnaryOp::..., x).
#define FREIGHT_DECLARE_UNARY(E, name, ...) Tensor name(const Tensor& x);
FREIGHT_UNARY_OPS(FREIGHT_DECLARE_UNARY, FREIGHT_DECLARE_UNARY)
#undef FREIGHT_DECLARE_UNARY
Tensor unary(UnaryOp op, const Tensor& x);

// ---- activations over a dimension ----
Tensor softmax(const Tensor& x, int64_t dim = -1);
Tensor log_softmax(const Tensor& x, int64_t dim = -1);

// ---- reductions ----
Tensor sum(const Tensor& x);  // all elements -> scalar (shape [])
Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);
Tensor mean(const Tensor& x);
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);
// int64, not differentiable; torch.argmax's rule: the first maximum, a NaN above everything.
Tensor argmax(const Tensor& x, int64_t dim = -1);
// Sums `x` down to `shape` over the broadcast dimensions (the backward of broadcasting).
Tensor sum_to(const Tensor& x, const Shape& shape);

// ---- linear algebra ----
// [m,k]@[k,n] -> [m,n]; [b,m,k]@[b,k,n] -> [b,m,n]; [..., k]@[k,n] -> [..., n].
Tensor matmul(const Tensor& a, const Tensor& b);
// x[..., in] · weight[out, in]ᵀ + bias[out] (bias may be undefined).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

// ---- shape (views where possible; all differentiable) ----
Tensor reshape(const Tensor& x, const Shape& shape);
Tensor flatten(const Tensor& x, int64_t start_dim = 1, int64_t end_dim = -1);
Tensor transpose(const Tensor& x, int64_t d0, int64_t d1);
Tensor permute(const Tensor& x, const std::vector<int64_t>& dims);
Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end);
Tensor select(const Tensor& x, int64_t dim, int64_t index);
Tensor cat(const std::vector<Tensor>& xs, int64_t dim);
Tensor stack(const std::vector<Tensor>& xs, int64_t dim);

// ---- losses (mean over the batch) ----
// logits [N, C], labels int64 [N] in [0, C): log-softmax and negative log-likelihood fused.
Tensor cross_entropy(const Tensor& logits, const Tensor& labels);
Tensor mse_loss(const Tensor& prediction, const Tensor& target);

// ---- convolution and pooling (NCHW) ----
// x [N, C, H, W], weight [O, C, kh, kw], bias [O] or undefined.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
              Pair stride = {1, 1}, Pair padding = {0, 0}, Pair dilation = {1, 1});
// relu(conv2d(...)), the ReLU applied as the convolution writes its output (no pass of its own
// forward), bit-identical to the pair: what nn::Sequential runs for a Conv2d followed by a ReLU
// that no pooling takes.
Tensor conv2d_relu(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
                   Pair stride = {1, 1}, Pair padding = {0, 0}, Pair dilation = {1, 1});
// The most bytes any of conv2d's passes (forward, input gradient where `input_grad`, weight
// gradient) takes from `device`'s allocator while it runs, beyond its operands and result
// (unrolled chunks, blocked copies, a library's scratch), for an input of shape x and a weight
// of shape weight; 0 where that device's kernels do not say. For memory planning (freight plan).
int64_t conv2d_workspace_bytes(const Shape& x, const Shape& weight, Pair stride, Pair padding,
                               Pair dilation, DType dtype, Device device, bool input_grad = true);
Tensor max_pool2d(const Tensor& x, Pair kernel, Pair stride = {0, 0}, Pair padding = {0, 0});
// max_pool2d(relu(x)) in one pass each way, bit-identical to the pair: what nn::Sequential runs
// for a ReLU followed by a MaxPool2d.
Tensor relu_max_pool2d(const Tensor& x, Pair kernel, Pair stride = {0, 0}, Pair padding = {0, 0});
// relu(max_pool2d(x)) in one pass each way, bit-identical to the pair (a window holding a NaN
// gives NaN, as relu of its NaN maximum): what nn::Sequential runs for a MaxPool2d followed by a
// ReLU.
Tensor max_pool2d_relu(const Tensor& x, Pair kernel, Pair stride = {0, 0}, Pair padding = {0, 0});
// Average pooling counts the padding zeros in the divisor (PyTorch's count_include_pad=True).
Tensor avg_pool2d(const Tensor& x, Pair kernel, Pair stride = {0, 0}, Pair padding = {0, 0});
// avg_pool2d(relu(x)) in one pass each way, bit-identical to the pair: what nn::Sequential runs
// for a ReLU followed by an AvgPool2d.
Tensor relu_avg_pool2d(const Tensor& x, Pair kernel, Pair stride = {0, 0}, Pair padding = {0, 0});

// ---- normalisation and regularisation ----
// x [N, C], [N, C, L] or [N, C, H, W]; statistics per channel C. In training the batch
// statistics are used and the running ones updated in place (unbiased variance, as PyTorch);
// in evaluation the running ones are used. weight/bias may be undefined (affine=false).
Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias,
                  const Tensor& running_mean, const Tensor& running_var, bool training,
                  double momentum = 0.1, double eps = 1e-5);
// relu(batch_norm(...)) in one pass forward and one backward, without the intermediate tensor:
// the same values and gradients (nn::Sequential uses it for a BatchNorm followed by a ReLU).
Tensor batch_norm_relu(const Tensor& x, const Tensor& weight, const Tensor& bias,
                       const Tensor& running_mean, const Tensor& running_var, bool training,
                       double momentum = 0.1, double eps = 1e-5);
// Zeroes each element with probability p and scales survivors by 1/(1-p); the identity when
// !training. The mask is a function of the generator's seed and offset, identical on all devices.
Tensor dropout(const Tensor& x, double p, bool training, Generator* gen = nullptr);
// indices int64 of any shape, weight [num, dim] -> [..., dim].
Tensor embedding(const Tensor& indices, const Tensor& weight);

// ---- recurrent ----
struct LstmResult {
  Tensor output;  // [B, T, H]: the hidden state at every step
  Tensor h_n;     // [B, H]: the last hidden state
  Tensor c_n;     // [B, H]: the last cell state
};
// One LSTM layer over a whole batch-first sequence x [B, T, I]. Weights as PyTorch:
// w_ih [4H, I], w_hh [4H, H], b_ih [4H], b_hh [4H] with the gates in the order i, f, g, o.
// h0, c0 [B, H] may be undefined (zeros).
LstmResult lstm_layer(const Tensor& x, const Tensor& h0, const Tensor& c0, const Tensor& w_ih,
                      const Tensor& w_hh, const Tensor& b_ih, const Tensor& b_hh);

// ---- communication ----
// Sums a contiguous tensor in place over the processes of a data-parallel job (freight/dist.h
// makes one; in one process it is the identity).
using SumOverRanks = std::function<void(Tensor&)>;
// Σ over the ranks of x, differentiable: the gradient is the sum over the ranks of the output
// gradients. Every rank must call it at the same point of the same graph (BatchNorm's statistics
// under --sync-bn).
Tensor all_reduce_sum(const Tensor& x, const SumOverRanks& sum_over_ranks);

}  // namespace freight
