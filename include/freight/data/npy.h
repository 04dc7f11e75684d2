// NumPy's .npy arrays (what np.save writes): the magic "\x93NUMPY", a version (1.0, 2.0 or 3.0),
// a header length (2 bytes for 1.0, 4 for 2.0 and 3.0, little-endian), then a Python dict
// literal {'descr': '<f4', 'fortran_order': False, 'shape': (N, ...), } padded with spaces, then
// the elements. Freight reads little-endian, C-ordered uint8, int32, int64, float32 and float64
// arrays; every other file is a freight::Error naming the file, what is wrong and the shape.
#pragma once
#include <string>

#include "freight/tensor.h"

namespace freight::data {

struct NpyHeader {
  std::string descr;  // as written: "<f4", "|u1", ...
  DType dtype;        // what it reads as
  Shape shape;        // () for a scalar
  uint64_t data_bytes = 0;
};

// The header's dict literal, checked: keys, endianness, order, dtype, shape (overflow included).
// `where` names the file (or archive entry) in messages: "NumPy file 'x.npy'".
NpyHeader parse_npy_header(const std::string& text, const std::string& where);

// A whole .npy file as a CPU tensor of its own dtype. Nothing is allocated before the file is
// known to hold every byte the header describes.
Tensor read_npy(const std::string& path);

}  // namespace freight::data
