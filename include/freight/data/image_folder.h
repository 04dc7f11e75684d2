// Image folders in PyTorch's ImageFolder layout: one folder per class, its name the class name.
//
//   root/<class>/**/*.png|*.jpg|*.jpeg                 one set; the test split is held out of it
//   root/train/<class>/...  root/test/<class>/...      the two splits as given (val/ is taken
//                                                      for test/ when there is no test/)
//
// Classes are the train folder's subfolders, sorted by name (byte order, as torchvision sorts
// them), and a class's index is its position in that order; the test folder's classes must be
// among them and take the same indices (a class missing from test/ is fine). Within a class the
// files are sorted by their path below the class folder (subfolders are searched, as torchvision
// does). Folders and files whose names start with '.' are ignored. Files of other extensions are
// skipped with a note; files named as another image format (.gif, .bmp, .webp, .tif, ...) are an
// error, since they are images the user meant to train on that Freight cannot read.
//
// Without a test/ (or val/) folder the test split is held out of the one set: from each class
// of n >= 2 images, max(1, round(n / 5)) images (20%), those whose relative paths hash lowest
// (FNV-1a, 64 bits). The split depends on the file names only: the same for every run, seed and
// machine, and a file added later leaves the others where they were unless it displaces one.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "freight/data/dataset.h"

namespace freight::data {

// The share of each class held out as the test split when the folder has no test/ or val/.
inline constexpr double kHeldOutFraction = 0.2;

// The files of one split of an image folder, found without decoding them.
struct ImageFolderIndex {
  std::string root;                  // the folder as given
  std::string split_dir;             // where the split's class folders are
  std::vector<std::string> classes;  // sorted; index = label
  std::vector<std::string> files;    // the split's images, class by class, each class sorted
  std::vector<int64_t> labels;       // one per file
  std::vector<std::string> notes;    // skipped files, the held-out split, test classes missing
};

// Lists split "train" or "test" of the folder `root`. Errors (freight::Error, naming the folder
// or file): `root` missing, no class folders, an empty class folder, a test class that train
// lacks, a file of an image format Freight does not read, test/ without train/.
ImageFolderIndex index_image_folder(const std::string& root, const std::string& split);

// A split of an image folder decoded for a model whose input is `sample_shape`: [C, H, W]
// (C = 1 or 3) or [H, W] (gray). Every image is converted to C channels and resized to H x W
// when its size differs (freight/data/image.h says how), decoded in parallel on the OpenMP
// threads (freight::num_threads()), and stored as uint8 [N, ...sample_shape], labels int64 [N].
// `model` names the model in errors. The dataset's notes say what was done and how long the
// decoding took; its class_names are the classes.
Dataset load_image_folder(const std::string& root, const std::string& split,
                          const Shape& sample_shape, const std::string& model);

// Whether `path` is a directory that load_image_folder should read: a directory that holds no
// MNIST IDX files and no train.txt (those layouts are read by their own loaders).
bool is_image_folder_candidate(const std::string& path);

}  // namespace freight::data
