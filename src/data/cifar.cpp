// CIFAR-10/100 binary batches (the layout is in include/freight/data/cifar.h). Each file's size
// is checked against the record size before anything is allocated; records are then read in
// blocks and split into the image tensor and the labels.
#include "freight/data/cifar.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "data/byte_stream.h"
#include "freight/error.h"

namespace freight::data {

namespace {

namespace fs = std::filesystem;

constexpr int64_t kPixels = 3 * 32 * 32;

struct Layout {
  int classes;
  const char* title;   // "CIFAR-10"
  const char* folder;  // what the tarball unpacks into
  const char* python_folder;
  int64_t label_bytes;
  int64_t record() const { return label_bytes + kPixels; }
  std::string record_text() const {
    return label_bytes == 1 ? "1 label byte + 3072 pixel bytes"
                            : "1 coarse and 1 fine label byte + 3072 pixel bytes";
  }
  std::vector<std::string> files(const std::string& split) const {
    if (classes == 100) return {split == "train" ? "train.bin" : "test.bin"};
    if (split == "test") return {"test_batch.bin"};
    std::vector<std::string> f;
    for (int i = 1; i <= 5; ++i) f.push_back(fmt::format("data_batch_{}.bin", i));
    return f;
  }
};

Layout layout(int classes) {
  FREIGHT_CHECK(classes == 10 || classes == 100,
                fmt::format("CIFAR has 10 or 100 classes, not {}", classes));
  if (classes == 10) return {10, "CIFAR-10", "cifar-10-batches-bin", "cifar-10-batches-py", 1};
  return {100, "CIFAR-100", "cifar-100-binary", "cifar-100-python", 2};
}

// The number of whole records in a file, or an error saying why its size is wrong.
int64_t count_records(const InputFile& f, const Layout& l) {
  const uint64_t size = f.size(), rec = uint64_t(l.record());
  FREIGHT_CHECK(size > 0, fmt::format("{} batch '{}' is empty", l.title, f.path()));
  FREIGHT_CHECK(
      size % rec == 0,
      fmt::format("{} batch '{}' is truncated or not a {} batch: its {} bytes are not "
                  "a multiple of the {}-byte record ({}): {} whole records, then {} "
                  "bytes of a truncated one",
                  l.title, f.path(), l.title, size, rec, l.record_text(), size / rec, size % rec));
  return int64_t(size / rec);
}

// Reads n records of `f` into images [n, 3072] and labels [n].
void read_records(const InputFile& f, const Layout& l, int64_t n, uint8_t* images,
                  int64_t* labels) {
  constexpr int64_t kBlock = 1024;
  const int64_t rec = l.record();
  std::vector<uint8_t> buf(size_t(std::min(n, kBlock) * rec));
  for (int64_t first = 0; first < n; first += kBlock) {
    int64_t count = std::min(kBlock, n - first);
    uint64_t want = uint64_t(count * rec);
    uint64_t got = f.read_at(uint64_t(first * rec), buf.data(), want);
    FREIGHT_CHECK(got == want, fmt::format("{} batch '{}' is truncated: record {} of {} ends past "
                                           "the end of the file (it shrank while it was read)",
                                           l.title, f.path(), first + int64_t(got) / rec, n));
    for (int64_t i = 0; i < count; ++i) {
      const uint8_t* r = buf.data() + i * rec;
      int64_t k = first + i;
      if (l.classes == 100)
        FREIGHT_CHECK(r[0] < 20, fmt::format("{} batch '{}': record {} (at byte {}) has coarse "
                                             "label {}, out of range for 20 superclasses; the "
                                             "file is corrupt or not a {} batch",
                                             l.title, f.path(), k, k * rec, int(r[0]), l.title));
      int label = r[l.label_bytes - 1];
      FREIGHT_CHECK(label < l.classes,
                    fmt::format("{} batch '{}': record {} (at byte {}) has label {}, out of "
                                "range for {} classes; the file is corrupt or not a {} batch",
                                l.title, f.path(), k, k * rec, label, l.classes, l.title));
      labels[k] = label;
      std::memcpy(images + k * kPixels, r + l.label_bytes, size_t(kPixels));
    }
  }
}

Dataset read_files(const std::vector<std::string>& paths, const Layout& l,
                   const std::string& name) {
  std::vector<std::unique_ptr<InputFile>> files;
  std::vector<int64_t> counts;
  int64_t total = 0;
  for (const std::string& p : paths) {
    files.push_back(std::make_unique<InputFile>(p, std::string(l.title) + " batch"));
    counts.push_back(count_records(*files.back(), l));
    total += counts.back();
  }
  Dataset d;
  d.name = name;
  d.num_classes = l.classes;
  d.inputs = Tensor::empty({total, 3, 32, 32}, DType::U8);
  d.labels = Tensor::empty({total}, DType::I64);
  int64_t at = 0;
  for (size_t i = 0; i < files.size(); ++i) {
    read_records(*files[i], l, counts[i], d.inputs.data<uint8_t>() + at * kPixels,
                 d.labels.data<int64_t>() + at);
    at += counts[i];
  }
  return d;
}

}  // namespace

Dataset read_cifar_batch(const std::string& path, int classes) {
  return read_files({path}, layout(classes), path);
}

Dataset load_cifar(const std::string& dir, int classes, const std::string& split) {
  const Layout l = layout(classes);
  FREIGHT_CHECK(split == "train" || split == "test",
                fmt::format("dataset split '{}' is not train or test", split));
  FREIGHT_CHECK(
      fs::is_directory(dir),
      fmt::format("{} directory '{}' does not exist (or is not a directory)", l.title, dir));
  // The tarball unpacks into one folder; accept its parent as well as the folder itself.
  fs::path base =
      fs::is_directory(fs::path(dir) / l.folder) ? fs::path(dir) / l.folder : fs::path(dir);
  std::vector<std::string> paths, missing;
  for (const std::string& f : l.files(split)) {
    paths.push_back((base / f).string());
    if (!fs::exists(base / f)) missing.push_back(f);
  }
  if (!missing.empty()) {
    auto list = [](const std::vector<std::string>& v) {
      std::string s;
      for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + v[i];
      return s;
    };
    const std::vector<std::string> all = l.files(split);
    // The Python version's files are the same names without ".bin" (pickles).
    std::string hint;
    const Layout other = layout(l.classes == 10 ? 100 : 10);
    if (fs::exists(fs::path(dir) / l.python_folder) ||
        fs::exists(base / all[0].substr(0, all[0].size() - 4)))
      hint = fmt::format(
          "; this looks like the Python version ({}), which Freight does not "
          "read: download the binary version",
          l.python_folder);
    else if (fs::exists(fs::path(dir) / other.folder) || fs::exists(base / other.files(split)[0]))
      hint =
          fmt::format("; this looks like {}: --data cifar{}:{}", other.title, other.classes, dir);
    throw Error(fmt::format(
        "{} directory '{}' {} (the layout of the binary version: DIR is the folder {}/ of the "
        "unpacked tarball, or the folder holding it){}",
        l.title, base.string(),
        missing.size() == all.size()
            ? fmt::format("holds none of the {} split's files: {}", split, list(all))
            : fmt::format("lacks {} of the {} split's files {}", list(missing), split, list(all)),
        l.folder, hint));
  }
  return read_files(paths, l, fmt::format("cifar{}/{}", classes, split));
}

bool is_cifar_data(const std::string& data) {
  for (const char* p : {"cifar10", "cifar100"})
    if (data == p || data.rfind(std::string(p) + ":", 0) == 0) return true;
  return false;
}

Dataset load_cifar_data(const std::string& data, const std::string& split) {
  size_t colon = data.find(':');
  std::string kind = data.substr(0, colon);
  FREIGHT_CHECK(colon != std::string::npos && colon + 1 < data.size(),
                fmt::format("--data {} needs the directory that holds the batches: --data {}:DIR",
                            data, kind));
  return load_cifar(data.substr(colon + 1), kind == "cifar10" ? 10 : 100, split);
}

std::pair<double, double> cifar_normalisation(int classes) {
  // From the per-channel statistics of the training sets (CIFAR-10: means 0.4914, 0.4822,
  // 0.4465, standard deviations 0.2470, 0.2435, 0.2616; CIFAR-100: 0.5071, 0.4865, 0.4409 and
  // 0.2673, 0.2564, 0.2762): the mean of the means, and the square root of the mean variance plus
  // the variance of the means.
  return classes == 100 ? std::pair{0.4782, 0.2682} : std::pair{0.4734, 0.2516};
}

}  // namespace freight::data
