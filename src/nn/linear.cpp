#include <fmt/format.h>

#include "freight/error.h"
#include "freight/nn/layers.h"
#include "freight/ops.h"
#include "nn/init.h"

namespace freight::nn {

Linear::Linear(int64_t in_features, int64_t out_features, bool bias)
    : Module("Linear"), in_(in_features), out_(out_features) {
  FREIGHT_CHECK(in_features > 0 && out_features > 0,
                fmt::format("Linear({}, {}): sizes must be positive", in_features, out_features));
  double bound = default_bound(in_features);
  weight_ = register_parameter("weight", uniform_init({out_, in_}, bound));
  if (bias) bias_ = register_parameter("bias", uniform_init({out_}, bound));
}

std::string Linear::describe() const {
  return bias_.defined() ? fmt::format("Linear({}, {})", in_, out_)
                         : fmt::format("Linear({}, {}, bias=false)", in_, out_);
}

Shape Linear::output_shape(const Shape& in) const {
  FREIGHT_CHECK(!in.empty() && in.back() == in_,
                fmt::format("{}: input of shape {} does not end in {} features", describe(),
                            shape_str(in), in_));
  Shape out = in;
  out.back() = out_;
  return out;
}

double Linear::flops(const Shape& in) const {
  double rows = double(shape_numel(output_shape(in)) / out_);
  return 2.0 * rows * double(in_) * double(out_);  // the GEMM; bias adds are not counted
}

Tensor Linear::forward(const Tensor& x) {
  FREIGHT_CHECK(x.dim() >= 1 && x.size(-1) == in_,
                fmt::format("{}: input of shape {} does not end in {} features", describe(),
                            shape_str(x.shape()), in_));
  return linear(x, weight_, bias_);
}

}  // namespace freight::nn
