// The .npy reader over a stream of known length (a file, or an entry of an .npz archive).
#pragma once
#include <string>

#include "data/byte_stream.h"
#include "freight/tensor.h"

namespace freight::data {

// Reads one .npy array from `in`, which delivers exactly `total` bytes (the caller has made
// sure they exist, so allocating what the header asks for within `total` is justified).
// `where` names the source in messages.
Tensor read_npy_stream(ByteStream& in, uint64_t total, const std::string& where);

}  // namespace freight::data
