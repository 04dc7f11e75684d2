// The layers, with PyTorch's constructors, parameter names, layouts and default initialisation
// (drawn from freight::default_generator(), so manual_seed(s) makes a model reproducible).
// Every layer reports its output shape and forward FLOPs for an input shape (for summaries).
#pragma once
#include <cstdint>
#include <string>

#include "freight/nn/module.h"
#include "freight/ops.h"
#include "freight/unary_ops.h"

namespace freight {
class Generator;
}

namespace freight::nn {

// A (height, width) pair for kernels, strides, paddings and dilations: Size2(3) is 3x3,
// Size2{3, 5} is 3 high and 5 wide.
struct Size2 {
  int64_t h = 0, w = 0;
  Size2(int64_t both) : h(both), w(both) {}  // NOLINT: implicit on purpose, Conv2d(1, 6, 5)
  Size2(int64_t height, int64_t width) : h(height), w(width) {}
  bool square() const { return h == w; }
};

// y = x·Wᵀ + b over the last dimension. weight [out, in], bias [out]; both U(−1/√in, 1/√in)
// (PyTorch's kaiming_uniform with a = √5, whose bound gain·√(3/fan_in) reduces to 1/√fan_in).
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  Tensor forward(const Tensor& x) override;
  std::string describe() const override;
  Shape output_shape(const Shape& in) const override;
  double flops(const Shape& in) const override;
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }
  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }  // undefined when built with bias = false

 private:
  int64_t in_, out_;
  Tensor weight_, bias_;
};

// 2-D convolution over NCHW input. weight [out, in, kh, kw], bias [out]; both
// U(−1/√fan_in, 1/√fan_in) with fan_in = in·kh·kw.
class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, Size2 kernel, Size2 stride = 1,
         Size2 padding = 0, Size2 dilation = 1, bool bias = true);
  Tensor forward(const Tensor& x) override;
  // relu(forward(x)), the ReLU applied as the output is written (conv2d_relu): what Sequential
  // runs for a Conv2d followed by a ReLU that no pooling takes.
  Tensor forward_relu(const Tensor& x);
  std::string describe() const override;
  Shape output_shape(const Shape& in) const override;
  double flops(const Shape& in) const override;  // 2·O·OH·OW·C·kh·kw per image
  int64_t workspace_bytes(const Shape& in, Device device, bool input_grad) const override;
  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }
  Size2 stride() const { return stride_; }
  Size2 dilation() const { return dilation_; }

 private:
  int64_t in_, out_;
  Size2 kernel_, stride_, padding_, dilation_;
  Tensor weight_, bias_;
};

// Max / average pooling over NCHW input. The stride defaults to the kernel size (pass 0 for
// that); average pooling counts padding zeros in the divisor, as PyTorch's default.
class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(Size2 kernel, Size2 stride = 0, Size2 padding = 0);
  Tensor forward(const Tensor& x) override;
  // forward(relu(x)) in one pass each way (relu_max_pool2d): what Sequential runs for a ReLU
  // followed by a MaxPool2d.
  Tensor forward_relu(const Tensor& x);
  // relu(forward(x)) in one pass each way (max_pool2d_relu): what Sequential runs for a
  // MaxPool2d followed by a ReLU.
  Tensor forward_then_relu(const Tensor& x);
  std::string describe() const override;
  Shape output_shape(const Shape& in) const override;
  double flops(const Shape& in) const override;  // kh·kw comparisons per output element

 private:
  Size2 kernel_, stride_, padding_;
};

class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(Size2 kernel, Size2 stride = 0, Size2 padding = 0);
  Tensor forward(const Tensor& x) override;
  // forward(relu(x)) in one pass each way (relu_avg_pool2d): what Sequential runs for a ReLU
  // followed by an AvgPool2d.
  Tensor forward_relu(const Tensor& x);
  std::string describe() const override;
  Shape output_shape(const Shape& in) const override;
  double flops(const Shape& in) const override;  // kh·kw additions per output element

 private:
  Size2 kernel_, stride_, padding_;
};

// Batch normalisation per channel (dimension 1). Parameters weight [C] = 1, bias [C] = 0;
// buffers running_mean [C] = 0, running_var [C] = 1 and num_batches_tracked (int64 scalar, +1 per
// training forward). Training uses the batch statistics and updates the running ones
// (r ← (1 − momentum)·r + momentum·batch, unbiased variance); evaluation uses the running ones.
class BatchNorm : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  // relu(forward(x)) in one pass each way (batch_norm_relu): what Sequential runs for a
  // BatchNorm followed by a ReLU.
  Tensor forward_relu(const Tensor& x);
  std::string describe() const override;
  Shape output_shape(const Shape& in) const override;
  double flops(const Shape& in) const override;  // scale and shift: 2 per element
  double bytes(const Shape& in) const override;  // training: two passes over the input
  int64_t num_features() const { return channels_; }
  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }
  const Tensor& running_mean() const { return running_mean_; }
  const Tensor& running_var() const { return running_var_; }
  const Tensor& num_batches_tracked() const { return num_batches_; }
  // Training then normalises with the statistics of the whole global batch, summed over the
  // ranks of a data-parallel job by `sum` (--sync-bn; an empty function: this rank's batch).
  void set_sum_over_ranks(SumOverRanks sum) { sum_over_ranks_ = std::move(sum); }

 protected:
  // Accepts inputs of rank min_rank..max_rank (BatchNorm1d: 2..3 for [N, C] and [N, C, L]).
  BatchNorm(const char* type_name, int64_t min_rank, int64_t max_rank, int64_t num_features,
            double eps, double momentum);

 private:
  void check_input(const Shape& in) const;
  Tensor run(const Tensor& x, bool relu);
  Tensor run_synced(const Tensor& x, bool relu);
  int64_t min_rank_, max_rank_, channels_;
  double eps_, momentum_;
  Tensor weight_, bias_, running_mean_, running_var_, num_batches_;
  SumOverRanks sum_over_ranks_;
};

class BatchNorm1d : public BatchNorm {  // [N, C] or [N, C, L]
 public:
  explicit BatchNorm1d(int64_t num_features, double eps = 1e-5, double momentum = 0.1);
};

class BatchNorm2d : public BatchNorm {  // [N, C, H, W]
 public:
  explicit BatchNorm2d(int64_t num_features, double eps = 1e-5, double momentum = 0.1);
};

// Zeroes each element with probability p in training and scales the rest by 1/(1 − p); the
// identity in evaluation. Draws from the generator set here, else the global one.
class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& x) override;
  std::string describe() const override;
  double flops(const Shape& in) const override;
  void set_generator(Generator* gen) { gen_ = gen; }  // not owned; nullptr: the global one
  double p() const { return p_; }

 private:
  double p_;
  Generator* gen_ = nullptr;
};

// Elementwise activations, one class per activation row of freight/unary_ops.h (ReLU, Sigmoid,
// Tanh, GELU, SiLU): the unary op of the row, one FLOP per element by the convention of
// Module::flops.
class Activation : public Module {
 public:
  Activation(UnaryOp op, const char* layer) : Module(layer), op_(op) {}
  Tensor forward(const Tensor& x) override;
  double flops(const Shape& in) const override;
  UnaryOp op() const { return op_; }

 private:
  UnaryOp op_;
};

#define FREIGHT_DECLARE_ACTIVATION(E, name, Saves, bwd, Layer) \
  class Layer : public Activation {                            \
   public:                                                     \
    Layer() : Activation(UnaryOp::E, #Layer) {}                \
  };
FREIGHT_ACTIVATION_OPS(FREIGHT_DECLARE_ACTIVATION)
#undef FREIGHT_DECLARE_ACTIVATION

// A new module of the activation layer of `op`, or nullptr when `op` is no activation.
ModulePtr make_activation(UnaryOp op);

// Merges dimensions start_dim..end_dim into one (a view when possible).
class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1);
  Tensor forward(const Tensor& x) override;
  std::string describe() const override;
  Shape output_shape(const Shape& in) const override;
  double bytes(const Shape&) const override { return 0; }  // a view

 private:
  int64_t start_, end_;
};

// Reshapes each sample, keeping the batch dimension: [B, ...] -> [B, shape...] (one entry of
// `shape` may be -1). For model files that reshape, e.g. an image's rows into a sequence.
class Reshape : public Module {
 public:
  explicit Reshape(Shape shape);
  Tensor forward(const Tensor& x) override;
  std::string describe() const override;
  Shape output_shape(const Shape& in) const override;
  double bytes(const Shape&) const override { return 0; }  // a view

 private:
  Shape shape_;
};

// Lookup table: int64 indices of any shape -> [..., dim]. weight [num, dim] ~ N(0, 1).
class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim);
  Tensor forward(const Tensor& indices) override;
  std::string describe() const override;
  Shape output_shape(const Shape& in) const override;
  double bytes(const Shape& in) const override;  // int64 indices, the rows looked up, the output
  const Tensor& weight() const { return weight_; }

 private:
  int64_t num_, dim_;
  Tensor weight_;
};

// x[:, -1, :] of a batch-first sequence [B, T, H] -> [B, H] (so an LSTM classifier is a
// Sequential: LSTM, LastStep, Linear).
class LastStep : public Module {
 public:
  LastStep() : Module("LastStep") {}
  Tensor forward(const Tensor& x) override;
  Shape output_shape(const Shape& in) const override;
  double bytes(const Shape&) const override { return 0; }  // a view
};

}  // namespace freight::nn
