// safetensors files: an 8-byte little-endian header length, a JSON header mapping each name to
// {dtype, shape, data_offsets} (plus an optional "__metadata__" map of strings), then the raw
// little-endian tensor bytes. The format of Hugging Face's safetensors, readable from PyTorch.
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "freight/tensor.h"

namespace freight::io {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;
using Metadata = std::map<std::string, std::string>;

// Writes atomically: a temporary file beside `path`, fsync, rename over `path`, fsync of the
// directory. A crash at any point leaves either the old file or the new one, never a mix.
// Tensors on a GPU are copied to the host first.
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const Metadata& metadata = {});

struct SafetensorsFile {
  NamedTensors tensors;  // in file order of their data
  Metadata metadata;
};
// Reads and validates a file (sizes, offsets, dtypes, JSON); every error names the file and,
// where it applies, the tensor.
SafetensorsFile load_safetensors(const std::string& path);

}  // namespace freight::io
