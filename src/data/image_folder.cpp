// Image folders (freight/data/image_folder.h): listing the classes and files of a split, the
// held-out test split, and the parallel decoding into one uint8 tensor.
#include "freight/data/image_folder.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>

#include "freight/data/image.h"
#include "freight/error.h"
#include "freight/runtime.h"

namespace freight::data {

namespace {
namespace fs = std::filesystem;

std::string lower_extension(const fs::path& p) {
  std::string e = p.extension().string();
  for (char& ch : e) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  return e;
}
bool is_image_name(const fs::path& p) {
  std::string e = lower_extension(p);
  return e == ".png" || e == ".jpg" || e == ".jpeg";
}
// Images Freight does not decode: an error rather than a skip, since the user meant them.
bool is_other_image_name(const fs::path& p) {
  static const std::set<std::string> others{".gif",  ".bmp",  ".webp", ".tif",  ".tiff",
                                            ".ppm",  ".pgm",  ".pbm",  ".pnm",  ".ico",
                                            ".heic", ".heif", ".avif", ".jfif", ".jxl"};
  return others.count(lower_extension(p)) > 0;
}
bool hidden(const fs::path& p) {
  std::string n = p.filename().string();
  return !n.empty() && n[0] == '.';
}

// Subfolders of `dir` (not hidden), sorted by name.
std::vector<std::string> subfolders(const fs::path& dir) {
  std::vector<std::string> names;
  for (const fs::directory_entry& e : fs::directory_iterator(dir))
    if (!hidden(e.path()) && e.is_directory()) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// The .png/.jpg/.jpeg files below a class folder (subfolders included, hidden ones not), sorted
// by their path below it; other files go to `skipped`.
std::vector<std::string> class_files(const fs::path& dir, std::vector<std::string>& skipped) {
  std::vector<std::string> files;
  for (auto it = fs::recursive_directory_iterator(dir); it != fs::recursive_directory_iterator();
       ++it) {
    const fs::path& p = it->path();
    if (hidden(p)) {
      if (it->is_directory()) it.disable_recursion_pending();
      continue;
    }
    if (it->is_directory()) continue;
    if (is_image_name(p)) {
      files.push_back(p.lexically_relative(dir).generic_string());
    } else {
      FREIGHT_CHECK(!is_other_image_name(p),
                    fmt::format("image folder: '{}' is a {} file; Freight reads PNG and JPEG "
                                "only (.png, .jpg, .jpeg): convert it (e.g. ImageMagick's "
                                "convert in out.png) or move it out of the folder",
                                p.string(), lower_extension(p)));
      skipped.push_back(p.string());
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : s) h = (h ^ ch) * 0x100000001b3ull;
  return h;
}

// The held-out test images of one class: the max(1, round(n/5)) whose paths hash lowest (none
// when the class has a single image). Returns a mask over `files`.
std::vector<bool> held_out(const std::vector<std::string>& files) {
  const size_t n = files.size();
  std::vector<bool> test(n, false);
  if (n < 2) return test;
  size_t k = std::max<size_t>(1, size_t(std::lround(double(n) * kHeldOutFraction)));
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    uint64_t ha = fnv1a(files[a]), hb = fnv1a(files[b]);
    return ha != hb ? ha < hb : files[a] < files[b];
  });
  for (size_t i = 0; i < k; ++i) test[order[i]] = true;
  return test;
}

std::string list_names(const std::vector<std::string>& names, size_t at_most = 10) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < at_most; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > at_most) s += fmt::format(", ... ({} in all)", names.size());
  return s;
}

// What a folder that holds no class folders holds instead, for the error.
std::string no_classes_error(const fs::path& dir, const std::string& root) {
  int64_t images = 0, files = 0;
  for (const fs::directory_entry& e : fs::directory_iterator(dir))
    if (!hidden(e.path()) && !e.is_directory()) ++files, images += is_image_name(e.path());
  std::string held = images > 0 ? fmt::format(
                                      "; it holds {} images directly: put each class's images in a "
                                      "folder of its own, named after the class",
                                      images)
                     : files > 0 ? fmt::format("; it holds {} files and no folders", files)
                                 : "; it is empty";
  return fmt::format(
      "--data {}: no class folders in '{}'{}. Freight reads, from a directory: an image folder "
      "(DIR/<class>/*.png|jpg|jpeg, or DIR/train/<class>/... and DIR/test/<class>/...), a text "
      "corpus (DIR/train.txt, valid.txt, test.txt) or MNIST IDX files "
      "(DIR/train-images-idx3-ubyte[.gz], ...)",
      root, dir.string(), held);
}
}  // namespace

bool is_image_folder_candidate(const std::string& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return false;
  fs::path p(path);
  for (const char* f : {"train-images-idx3-ubyte", "train-images-idx3-ubyte.gz",
                        "t10k-images-idx3-ubyte", "t10k-images-idx3-ubyte.gz", "train.txt"})
    if (fs::exists(p / f, ec)) return false;
  return true;
}

ImageFolderIndex index_image_folder(const std::string& root, const std::string& split) {
  FREIGHT_CHECK(split == "train" || split == "test",
                fmt::format("image folder '{}': split '{}' is not train or test", root, split));
  const fs::path r(root);
  FREIGHT_CHECK(fs::is_directory(r),
                fmt::format("image folder '{}' does not exist or is not a directory", root));
  ImageFolderIndex ix;
  ix.root = root;
  // The layout: train/ (+ test/ or val/), or the class folders at the top.
  fs::path train_dir = r, test_dir;
  const bool has_train = fs::is_directory(r / "train");
  if (has_train) {
    train_dir = r / "train";
    if (fs::is_directory(r / "test"))
      test_dir = r / "test";
    else if (fs::is_directory(r / "val"))
      test_dir = r / "val";
  } else {
    for (const char* t : {"test", "val"})
      FREIGHT_CHECK(!fs::is_directory(r / t),
                    fmt::format("image folder '{}' has a {}/ folder but no train/: give the "
                                "training images as {}/train/<class>/... (or, if '{}' is a "
                                "class, rename it: train/, test/ and val/ name the splits)",
                                root, t, root, t));
  }
  ix.classes = subfolders(train_dir);
  FREIGHT_CHECK(!ix.classes.empty(), no_classes_error(train_dir, root));
  const bool held = test_dir.empty();
  fs::path dir = split == "train" || held ? train_dir : test_dir;
  ix.split_dir = dir.string();

  std::vector<std::string> names = ix.classes;  // the folders this split reads
  if (!held && split == "test") {
    names = subfolders(dir);
    FREIGHT_CHECK(!names.empty(), no_classes_error(dir, root));
    std::vector<std::string> missing;
    for (const std::string& n : names)
      FREIGHT_CHECK(std::binary_search(ix.classes.begin(), ix.classes.end(), n),
                    fmt::format("image folder '{}': the test split '{}' has a class folder '{}' "
                                "that the training split '{}' lacks (classes there: {})",
                                root, dir.string(), n, train_dir.string(), list_names(ix.classes)));
    for (const std::string& c : ix.classes)
      if (!std::binary_search(names.begin(), names.end(), c)) missing.push_back(c);
    if (!missing.empty())
      ix.notes.push_back(fmt::format("test split '{}' has no images of {} of the {} classes: {}",
                                     dir.string(), missing.size(), ix.classes.size(),
                                     list_names(missing)));
  }
  std::vector<std::string> skipped;
  int64_t held_count = 0;
  for (const std::string& name : names) {
    const int64_t label =
        std::lower_bound(ix.classes.begin(), ix.classes.end(), name) - ix.classes.begin();
    const fs::path class_dir = dir / name;
    std::vector<std::string> files = class_files(class_dir, skipped);
    FREIGHT_CHECK(!files.empty(),
                  fmt::format("image folder '{}': class folder '{}' holds no .png, .jpg or .jpeg "
                              "files",
                              root, class_dir.string()));
    std::vector<bool> test =
        held ? held_out(files) : std::vector<bool>(files.size(), split == "test");
    for (size_t i = 0; i < files.size(); ++i) {
      held_count += test[i];
      if (test[i] != (split == "test")) continue;
      ix.files.push_back((class_dir / files[i]).string());
      ix.labels.push_back(label);
    }
  }
  if (!skipped.empty())
    ix.notes.push_back(fmt::format("skipped {} file{} that {} not .png, .jpg or .jpeg: {}",
                                   skipped.size(), skipped.size() == 1 ? "" : "s",
                                   skipped.size() == 1 ? "is" : "are", list_names(skipped, 5)));
  if (held && split == "test") {
    FREIGHT_CHECK(!ix.files.empty(),
                  fmt::format("image folder '{}' has no test/ or val/ folder, and no class has the "
                              "2 images needed to hold one out as the test split: add images, "
                              "or a test/ folder beside train/",
                              root));
    ix.notes.push_back(fmt::format(
        "test split: {} images held out of '{}' ({:.0f}% of each class, chosen by the hash of "
        "their names: the same for every run), since it has no {}",
        held_count, train_dir.string(), 100 * kHeldOutFraction,
        has_train ? "test/ or val/ beside train/" : "train/ and test/ (or val/) folders"));
  } else if (split == "test") {
    ix.notes.push_back(
        fmt::format("test split: {} images from '{}'", ix.files.size(), dir.string()));
  }
  return ix;
}

Dataset load_image_folder(const std::string& root, const std::string& split,
                          const Shape& sample_shape, const std::string& model) {
  const bool chw = sample_shape.size() == 3;
  FREIGHT_CHECK(chw || sample_shape.size() == 2,
                fmt::format("--data {}: an image folder needs a model whose input is an image, "
                            "[channels, height, width] or [height, width]; model '{}' takes {}",
                            root, model, shape_str(sample_shape)));
  const int64_t c = chw ? sample_shape[0] : 1;
  const int64_t h = sample_shape[chw ? 1 : 0], w = sample_shape[chw ? 2 : 1];
  FREIGHT_CHECK(c == 1 || c == 3,
                fmt::format("--data {}: model '{}' takes {} channels ({}); images give 1 (gray) "
                            "or 3 (RGB)",
                            root, model, c, shape_str(sample_shape)));
  auto t0 = std::chrono::steady_clock::now();
  ImageFolderIndex ix = index_image_folder(root, split);
  const int64_t n = int64_t(ix.files.size());
  Shape shape{n};
  shape.insert(shape.end(), sample_shape.begin(), sample_shape.end());
  Tensor inputs = Tensor::empty(shape, DType::U8);
  uint8_t* out = static_cast<uint8_t*>(inputs.data_ptr());
  const int64_t plane = h * w, sample = c * plane;

  // One image per iteration, any thread; errors are kept per image and the first (in file
  // order) is thrown after the loop, so the message does not depend on the thread timing.
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<std::pair<int64_t, int64_t>> sizes(
      static_cast<size_t>(n));  // (width, height) as stored
  std::vector<int> channels(static_cast<size_t>(n));
  const int threads = int(std::max<int64_t>(1, std::min<int64_t>(num_threads(), n)));
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (int64_t i = 0; i < n; ++i) {
    const std::string& file = ix.files[size_t(i)];
    try {
      Image im = decode_image(file);
      sizes[size_t(i)] = {im.width, im.height};
      channels[size_t(i)] = im.channels;
      im = resize_image(convert_channels(im, int(c)), h, w);
      uint8_t* dst = out + i * sample;
      for (int64_t k = 0; k < c; ++k)
        for (int64_t p = 0; p < plane; ++p) dst[k * plane + p] = im.pixels[size_t(p * c + k)];
    } catch (const std::exception& e) {
      errors[size_t(i)] = e.what();
    }
  }
  int64_t failed = 0;
  for (const std::string& e : errors) failed += !e.empty();
  for (const std::string& e : errors)
    if (!e.empty())
      throw Error(failed == 1
                      ? e
                      : fmt::format("{} (and {} more of the {} images failed)", e, failed - 1, n));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  Dataset d;
  d.name = root + "/" + split;
  d.num_classes = int64_t(ix.classes.size());
  d.class_names = ix.classes;
  d.inputs = inputs;
  d.labels = Tensor::from_vector(ix.labels, {n});
  if (split == "train")
    d.notes.push_back(fmt::format("image folder '{}': {} classes ({})", root, ix.classes.size(),
                                  list_names(ix.classes)));
  d.notes.insert(d.notes.end(), ix.notes.begin(), ix.notes.end());
  d.notes.push_back(fmt::format("{} split: decoded {} images in {:.2f} s on {} thread{}", split, n,
                                seconds, threads, threads == 1 ? "" : "s"));
  // Conversions, said once per split with the sizes seen.
  std::map<std::pair<int64_t, int64_t>, int64_t> resized;
  int64_t converted = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (sizes[size_t(i)] != std::pair<int64_t, int64_t>{w, h}) ++resized[sizes[size_t(i)]];
    converted += channels[size_t(i)] != c;
  }
  if (!resized.empty()) {
    int64_t count = 0;
    std::string seen;  // the first six sizes with their counts
    size_t shown = 0;
    for (const auto& [size, k] : resized) {
      count += k;
      if (shown < 6)
        seen += fmt::format("{}{}x{} ({})", shown ? ", " : "", size.first, size.second, k);
      else if (shown == 6)
        seen += fmt::format(" and {} more sizes", resized.size() - 6);
      ++shown;
    }
    d.notes.push_back(fmt::format(
        "{} split: resized {} of {} images to {}x{} (width x height) for model '{}' (area "
        "average when shrinking, bilinear when enlarging, aspect ratio not kept); sizes found: {}",
        split, count, n, w, h, model, seen));
  }
  if (converted > 0)
    d.notes.push_back(
        fmt::format("{} split: converted {} of {} images to {} for model '{}'", split, converted, n,
                    c == 1 ? "grayscale (BT.601 luma)" : "RGB (gray repeated)", model));
  return d;
}

}  // namespace freight::data
