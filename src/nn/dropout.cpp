// Dropout and Embedding.
#include <fmt/format.h>

#include "freight/error.h"
#include "freight/nn/layers.h"
#include "freight/ops.h"

namespace freight::nn {

Dropout::Dropout(double p) : Module("Dropout"), p_(p) {
  FREIGHT_CHECK(p >= 0 && p < 1, fmt::format("Dropout: p = {} must lie in [0, 1)", p));
}

std::string Dropout::describe() const {
  return fmt::format("Dropout(p={})", p_);
}

double Dropout::flops(const Shape& in) const {
  return is_training() ? double(shape_numel(in)) : 0.0;
}

Tensor Dropout::forward(const Tensor& x) {
  return dropout(x, p_, is_training(), gen_);
}

// ---------------------------------------------------------------- Embedding
Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim)
    : Module("Embedding"), num_(num_embeddings), dim_(embedding_dim) {
  FREIGHT_CHECK(
      num_embeddings > 0 && embedding_dim > 0,
      fmt::format("Embedding({}, {}): sizes must be positive", num_embeddings, embedding_dim));
  weight_ = register_parameter("weight", Tensor::normal({num_, dim_}));  // N(0, 1), as PyTorch
}

std::string Embedding::describe() const {
  return fmt::format("Embedding({}, {})", num_, dim_);
}

double Embedding::bytes(const Shape& in) const {
  double n = double(shape_numel(in));
  return 8.0 * n + 2.0 * 4.0 * n * double(dim_);  // the indices, the rows read, the output
}

Shape Embedding::output_shape(const Shape& in) const {
  Shape out = in;
  out.push_back(dim_);
  return out;
}

Tensor Embedding::forward(const Tensor& indices) {
  FREIGHT_CHECK(indices.dtype() == DType::I64,
                fmt::format("{}: indices must be int64, got {} of shape {}", describe(),
                            dtype_name(indices.dtype()), shape_str(indices.shape())));
  return embedding(indices, weight_);
}

}  // namespace freight::nn
