// A dataset from NumPy arrays: which arrays make which split, then the checks that x and y fit
// the model (dtype, sample shape, label shape and range, matching counts).
#include "freight/data/arrays.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "freight/data/npy.h"
#include "freight/data/npz.h"
#include "freight/error.h"

namespace freight::data {

namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t comma; (comma = s.find(',', start)) != std::string::npos; start = comma + 1)
    parts.push_back(s.substr(start, comma - start));
  parts.push_back(s.substr(start));
  return parts;
}

// One array and the words that name it in messages.
struct Named {
  Tensor t;
  std::string where;
};

template <class T>
int64_t first_out_of_range(const Tensor& t, int64_t hi) {
  const T* p = t.data<T>();
  for (int64_t i = 0, n = t.numel(); i < n; ++i)
    if (int64_t(p[i]) < 0 || int64_t(p[i]) >= hi) return i;
  return -1;
}

// The first value that is not finite or beyond float32's range, or -1.
template <class T>
int64_t first_unusable(const Tensor& t) {
  const T* p = t.data<T>();
  for (int64_t i = 0, n = t.numel(); i < n; ++i)
    if (!(std::fabs(double(p[i])) <= double(std::numeric_limits<float>::max()))) return i;
  return -1;
}

int64_t first_out_of_range(const Tensor& t, int64_t hi) {
  switch (t.dtype()) {
    case DType::U8:
      return first_out_of_range<uint8_t>(t, hi);
    case DType::I32:
      return first_out_of_range<int32_t>(t, hi);
    default:
      return first_out_of_range<int64_t>(t, hi);
  }
}

int64_t value_at(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::U8:
      return t.data<uint8_t>()[i];
    case DType::I32:
      return t.data<int32_t>()[i];
    default:
      return t.data<int64_t>()[i];
  }
}

// x as the model takes it: token ids (int64) or pixels/features (uint8 or float32).
Tensor model_inputs(const Named& x, const ArraysTarget& t) {
  const DType dt = x.t.dtype();
  const int64_t per_sample = std::max<int64_t>(1, x.t.numel() / x.t.size(0));
  if (t.input_dtype == DType::I64) {
    FREIGHT_CHECK(dt == DType::I64 || dt == DType::I32,
                  fmt::format("{} holds {} values, but model '{}' takes int64 token ids: save x "
                              "as integers (x.astype(np.int64))",
                              x.where, dtype_name(dt), t.model));
    int64_t bad = first_out_of_range(x.t, t.vocab);
    FREIGHT_CHECK(bad < 0,
                  fmt::format("{}: token id {} (sample {}) is out of range for model "
                              "'{}', whose vocabulary has {} tokens",
                              x.where, value_at(x.t, bad), bad / per_sample, t.model, t.vocab));
    return x.t.to(DType::I64);
  }
  FREIGHT_CHECK(dt == DType::U8 || dt == DType::F32 || dt == DType::F64,
                fmt::format("{} holds {} values; Freight reads integer x as token ids, but model "
                            "'{}' takes float32 inputs: save x as uint8 pixels or as floats "
                            "(x.astype(np.float32))",
                            x.where, dtype_name(dt), t.model));
  if (dt == DType::U8) return x.t;
  int64_t bad = dt == DType::F32 ? first_unusable<float>(x.t) : first_unusable<double>(x.t);
  FREIGHT_CHECK(bad < 0, fmt::format("{}: sample {} holds {:g}; inputs must be finite numbers "
                                     "within float32's range",
                                     x.where, bad / per_sample,
                                     dt == DType::F32 ? double(x.t.data<float>()[bad])
                                                      : x.t.data<double>()[bad]));
  return x.t.to(DType::F32);
}

Dataset assemble(const Named& x, const Named& y, const ArraysTarget& t, const std::string& name) {
  FREIGHT_CHECK(x.t.dim() >= 1 && x.t.size(0) > 0,
                fmt::format("{} holds no samples (shape {}); x must be [N, ...] with N > 0",
                            x.where, shape_str(x.t.shape())));
  const int64_t n = x.t.size(0);
  FREIGHT_CHECK(y.t.dim() >= 1 && y.t.size(0) == n,
                fmt::format("x and y hold different numbers of samples: {} has shape {} ({} "
                            "samples), {} has shape {} ({} labels)",
                            x.where, shape_str(x.t.shape()), n, y.where, shape_str(y.t.shape()),
                            y.t.dim() >= 1 ? y.t.size(0) : 0));
  Tensor inputs = model_inputs(x, t);
  Shape have(inputs.shape().begin() + 1, inputs.shape().end());
  if (have != t.input_shape) {
    FREIGHT_CHECK(shape_numel(have) == shape_numel(t.input_shape),
                  fmt::format("{}: samples of shape {} do not fit model '{}' (input {})", x.where,
                              shape_str(have), t.model, shape_str(t.input_shape)));
    Shape s{n};
    s.insert(s.end(), t.input_shape.begin(), t.input_shape.end());
    inputs = inputs.reshape(s);
  }
  const DType lt = y.t.dtype();
  FREIGHT_CHECK(lt == DType::I64 || lt == DType::I32 || lt == DType::U8,
                fmt::format("{} holds {} values; y must hold integer class labels (int64, int32 "
                            "or uint8): save y.astype(np.int64)",
                            y.where, dtype_name(lt)));
  Tensor labels;
  if (t.per_step_labels) {
    FREIGHT_CHECK(y.t.numel() == inputs.numel(),
                  fmt::format("{} has shape {}; model '{}' predicts a class per token, so y must "
                              "have x's shape {}",
                              y.where, shape_str(y.t.shape()), t.model, shape_str(x.t.shape())));
    labels = y.t.reshape(inputs.shape());
  } else {
    FREIGHT_CHECK(y.t.dim() == 1,
                  fmt::format("{} has shape {}; y must hold one class label per sample, shape "
                              "[{}]",
                              y.where, shape_str(y.t.shape()), n));
    labels = y.t;
  }
  int64_t bad = first_out_of_range(labels, t.classes);
  FREIGHT_CHECK(
      bad < 0, fmt::format("{}: label {} at index {} is out of range for model '{}' "
                           "with {} classes (labels are 0 to {})",
                           y.where, value_at(labels, bad), bad, t.model, t.classes, t.classes - 1));
  Dataset d;
  d.name = name;
  d.num_classes = t.classes;
  d.inputs = inputs;
  d.labels = labels.to(DType::I64);
  return d;
}

std::string no_test_note(const std::string& data, const std::string& what) {
  return fmt::format(
      "--data {} has no {}: the test split is the training arrays, so the test "
      "figures measure the fit, not generalisation",
      data, what);
}

Dataset load_npz(const std::string& path, const std::string& split, const ArraysTarget& t) {
  NpzFile f(path);
  const bool has_test = f.contains("x_test") || f.contains("y_test");
  for (const char* name : {"x", "y"}) {
    if (f.contains(name)) continue;
    std::string held;
    for (const std::string& a : f.names()) held += (held.empty() ? "" : ", ") + a;
    throw Error(fmt::format(
        "NumPy archive '{}' has no array '{}' (it holds {}): Freight trains on arrays x and y, "
        "and tests on x_test and y_test when present: np.savez('{}', x=inputs, y=labels){}",
        path, name, held.empty() ? "no arrays" : held, path,
        f.contains("arr_0") ? " (np.savez names arrays given without a name arr_0, arr_1, ...)"
                            : ""));
  }
  auto entry = [&](const std::string& name) {
    return Named{f.read(name), fmt::format("NumPy archive '{}' entry '{}.npy'", path, name)};
  };
  if (split == "test" && has_test) {
    for (const char* name : {"x_test", "y_test"})
      FREIGHT_CHECK(f.contains(name),
                    fmt::format("NumPy archive '{}' has {} but no {}: the test split needs both",
                                path, name == std::string("x_test") ? "y_test" : "x_test", name));
    return assemble(entry("x_test"), entry("y_test"), t, path + "/test");
  }
  Dataset d = assemble(entry("x"), entry("y"), t, path + "/train");
  if (split == "test") d.notes.push_back(no_test_note(path, "arrays x_test and y_test"));
  return d;
}

Dataset load_npy_files(const std::string& data, const std::string& split, const ArraysTarget& t) {
  std::vector<std::string> paths = split_commas(data);
  FREIGHT_CHECK(paths.size() == 2 || paths.size() == 4,
                fmt::format("--data {}: give the inputs and labels as two .npy files, --data "
                            "x.npy,y.npy (then x_test.npy,y_test.npy for a test split)",
                            data));
  size_t first = split == "test" && paths.size() == 4 ? 2 : 0;
  auto file = [&](size_t i) {
    return Named{read_npy(paths[i]), fmt::format("NumPy file '{}'", paths[i])};
  };
  Dataset d = assemble(file(first), file(first + 1), t, data + "/" + (first ? "test" : "train"));
  if (split == "test" && first == 0) d.notes.push_back(no_test_note(data, "test files"));
  return d;
}

}  // namespace

bool is_arrays_data(const std::string& data) {
  if (ends_with(data, ".npz")) return true;
  for (const std::string& p : split_commas(data))
    if (!ends_with(p, ".npy")) return false;
  return true;
}

Dataset load_arrays(const std::string& data, const std::string& split, const ArraysTarget& target) {
  FREIGHT_CHECK(split == "train" || split == "test",
                fmt::format("dataset split '{}' is not train or test", split));
  if (ends_with(data, ".npz")) return load_npz(data, split, target);
  return load_npy_files(data, split, target);
}

}  // namespace freight::data
