// A user's own arrays as a dataset: --data my.npz (arrays x and y, and x_test and y_test for the
// test split) or --data x.npy,y.npy[,x_test.npy,y_test.npy]. Without test arrays the test split
// is the training arrays themselves, and a note of the dataset says so. docs/data.md has the rules.
#pragma once
#include <string>

#include "freight/data/dataset.h"

namespace freight::data {

// What the arrays must fit: the model's input and its classes.
struct ArraysTarget {
  std::string model;  // for messages
  Shape input_shape;  // per sample; x's samples may also have the same element count
  DType input_dtype;  // F32: x uint8/float32/float64; I64: x int32/int64 token ids
  int64_t classes = 0;
  int64_t vocab = 0;             // token ids in [0, vocab) when input_dtype is I64
  bool per_step_labels = false;  // language models: y has x's shape, one label per token
};

// "*.npz", or two or four comma-separated "*.npy" paths.
bool is_arrays_data(const std::string& data);
// The train or test split, checked against `target`: x's dtype and sample shape, y's dtype,
// shape and range, and that x and y hold as many samples. Errors name the file and the entry.
Dataset load_arrays(const std::string& data, const std::string& split, const ArraysTarget& target);

}  // namespace freight::data
