// Conv2d and the pooling layers (NCHW).
#include <fmt/format.h>

#include "freight/error.h"
#include "freight/nn/layers.h"
#include "freight/ops.h"
#include "nn/init.h"

namespace freight::nn {

namespace {
std::string size2_str(Size2 s) {
  return s.square() ? fmt::format("{}", s.h) : fmt::format("{}x{}", s.h, s.w);
}

Pair pair(Size2 s) {
  return {s.h, s.w};
}

// Output length of a sliding window: ⌊(n + 2·pad − dilation·(k − 1) − 1) / stride⌋ + 1.
int64_t out_len(int64_t n, int64_t k, int64_t stride, int64_t pad, int64_t dilation) {
  return (n + 2 * pad - dilation * (k - 1) - 1) / stride + 1;
}

// Checks an NCHW input with `channels` channels (0: any) and returns [N, C, OH, OW] (C kept).
Shape window_output(const std::string& layer, const Shape& in, int64_t channels, Size2 k, Size2 s,
                    Size2 p, Size2 d) {
  FREIGHT_CHECK(in.size() == 4,
                fmt::format("{}: expects an input [N, C, H, W], got {}", layer, shape_str(in)));
  FREIGHT_CHECK(channels == 0 || in[1] == channels,
                fmt::format("{}: input {} has {} channels, expected {}", layer, shape_str(in),
                            in[1], channels));
  int64_t oh = out_len(in[2], k.h, s.h, p.h, d.h), ow = out_len(in[3], k.w, s.w, p.w, d.w);
  FREIGHT_CHECK(in[2] + 2 * p.h >= d.h * (k.h - 1) + 1 && in[3] + 2 * p.w >= d.w * (k.w - 1) + 1,
                fmt::format("{}: input {} is smaller than the kernel ({} with padding {})", layer,
                            shape_str(in), size2_str(k), size2_str(p)));
  return {in[0], in[1], oh, ow};
}

void check_positive(const char* layer, Size2 v, const char* what, int64_t min) {
  FREIGHT_CHECK(v.h >= min && v.w >= min,
                fmt::format("{}: {} {} must be at least {}", layer, what, size2_str(v), min));
}
}  // namespace

// ---------------------------------------------------------------- Conv2d
Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, Size2 kernel, Size2 stride, Size2 padding,
               Size2 dilation, bool bias)
    : Module("Conv2d"),
      in_(in_channels),
      out_(out_channels),
      kernel_(kernel),
      stride_(stride),
      padding_(padding),
      dilation_(dilation) {
  FREIGHT_CHECK(
      in_channels > 0 && out_channels > 0,
      fmt::format("Conv2d({}, {}): channel counts must be positive", in_channels, out_channels));
  check_positive("Conv2d", kernel, "kernel", 1);
  check_positive("Conv2d", stride, "stride", 1);
  check_positive("Conv2d", padding, "padding", 0);
  check_positive("Conv2d", dilation, "dilation", 1);
  double bound = default_bound(in_ * kernel.h * kernel.w);  // fan_in = C·kh·kw
  weight_ = register_parameter("weight", uniform_init({out_, in_, kernel.h, kernel.w}, bound));
  if (bias) bias_ = register_parameter("bias", uniform_init({out_}, bound));
}

std::string Conv2d::describe() const {
  std::string s = fmt::format("Conv2d({}, {}, kernel={}", in_, out_, size2_str(kernel_));
  if (stride_.h != 1 || stride_.w != 1) s += ", stride=" + size2_str(stride_);
  if (padding_.h != 0 || padding_.w != 0) s += ", padding=" + size2_str(padding_);
  if (dilation_.h != 1 || dilation_.w != 1) s += ", dilation=" + size2_str(dilation_);
  if (!bias_.defined()) s += ", bias=false";
  return s + ")";
}

Shape Conv2d::output_shape(const Shape& in) const {
  Shape out = window_output(describe(), in, in_, kernel_, stride_, padding_, dilation_);
  out[1] = out_;
  return out;
}

double Conv2d::flops(const Shape& in) const {
  Shape o = output_shape(in);
  // Each output element is a dot product of length C·kh·kw: 2·C·kh·kw per element.
  return 2.0 * double(o[0]) * double(out_) * double(o[2]) * double(o[3]) * double(in_) *
         double(kernel_.h) * double(kernel_.w);
}

int64_t Conv2d::workspace_bytes(const Shape& in, Device device, bool input_grad) const {
  output_shape(in);  // checks with this layer's name
  return conv2d_workspace_bytes(in, weight_.shape(), pair(stride_), pair(padding_), pair(dilation_),
                                weight_.dtype(), device, input_grad);
}

Tensor Conv2d::forward(const Tensor& x) {
  output_shape(x.shape());  // checks with this layer's name
  return conv2d(x, weight_, bias_, pair(stride_), pair(padding_), pair(dilation_));
}

Tensor Conv2d::forward_relu(const Tensor& x) {
  output_shape(x.shape());
  return conv2d_relu(x, weight_, bias_, pair(stride_), pair(padding_), pair(dilation_));
}

// ---------------------------------------------------------------- pooling
MaxPool2d::MaxPool2d(Size2 kernel, Size2 stride, Size2 padding)
    : Module("MaxPool2d"),
      kernel_(kernel),
      stride_(stride.h == 0 && stride.w == 0 ? kernel : stride),
      padding_(padding) {
  check_positive("MaxPool2d", kernel_, "kernel", 1);
  check_positive("MaxPool2d", stride_, "stride", 1);
  check_positive("MaxPool2d", padding_, "padding", 0);
  FREIGHT_CHECK(2 * padding_.h <= kernel_.h && 2 * padding_.w <= kernel_.w,
                fmt::format("MaxPool2d: padding {} must be at most half the kernel {}",
                            size2_str(padding_), size2_str(kernel_)));
}

std::string MaxPool2d::describe() const {
  std::string s =
      fmt::format("MaxPool2d(kernel={}, stride={}", size2_str(kernel_), size2_str(stride_));
  if (padding_.h != 0 || padding_.w != 0) s += ", padding=" + size2_str(padding_);
  return s + ")";
}

Shape MaxPool2d::output_shape(const Shape& in) const {
  return window_output(describe(), in, 0, kernel_, stride_, padding_, 1);
}

double MaxPool2d::flops(const Shape& in) const {
  return double(shape_numel(output_shape(in))) * double(kernel_.h * kernel_.w);
}

Tensor MaxPool2d::forward(const Tensor& x) {
  output_shape(x.shape());
  return max_pool2d(x, pair(kernel_), pair(stride_), pair(padding_));
}

Tensor MaxPool2d::forward_relu(const Tensor& x) {
  output_shape(x.shape());
  return relu_max_pool2d(x, pair(kernel_), pair(stride_), pair(padding_));
}

Tensor MaxPool2d::forward_then_relu(const Tensor& x) {
  output_shape(x.shape());
  return max_pool2d_relu(x, pair(kernel_), pair(stride_), pair(padding_));
}

AvgPool2d::AvgPool2d(Size2 kernel, Size2 stride, Size2 padding)
    : Module("AvgPool2d"),
      kernel_(kernel),
      stride_(stride.h == 0 && stride.w == 0 ? kernel : stride),
      padding_(padding) {
  check_positive("AvgPool2d", kernel_, "kernel", 1);
  check_positive("AvgPool2d", stride_, "stride", 1);
  check_positive("AvgPool2d", padding_, "padding", 0);
  FREIGHT_CHECK(2 * padding_.h <= kernel_.h && 2 * padding_.w <= kernel_.w,
                fmt::format("AvgPool2d: padding {} must be at most half the kernel {}",
                            size2_str(padding_), size2_str(kernel_)));
}

std::string AvgPool2d::describe() const {
  std::string s =
      fmt::format("AvgPool2d(kernel={}, stride={}", size2_str(kernel_), size2_str(stride_));
  if (padding_.h != 0 || padding_.w != 0) s += ", padding=" + size2_str(padding_);
  return s + ")";
}

Shape AvgPool2d::output_shape(const Shape& in) const {
  return window_output(describe(), in, 0, kernel_, stride_, padding_, 1);
}

double AvgPool2d::flops(const Shape& in) const {
  return double(shape_numel(output_shape(in))) * double(kernel_.h * kernel_.w);
}

Tensor AvgPool2d::forward(const Tensor& x) {
  output_shape(x.shape());
  return avg_pool2d(x, pair(kernel_), pair(stride_), pair(padding_));
}

Tensor AvgPool2d::forward_relu(const Tensor& x) {
  output_shape(x.shape());
  return relu_avg_pool2d(x, pair(kernel_), pair(stride_), pair(padding_));
}

}  // namespace freight::nn
