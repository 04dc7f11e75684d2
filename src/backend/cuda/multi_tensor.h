// The device-side table of a fused multi-tensor launch (the optimizer steps in optim.cu): one
// entry per tensor (its pointers, size, dtype and one small per-tensor value) followed by a list
// of work items (tensor, chunk). Block b of the launch walks work items b, b + gridDim, ...; item
// (t, k) covers elements [k·kChunk, min((k + 1)·kChunk, n_t)) of tensor t. Plain C++ (host code
// builds the table), unit-tested on the host in tests/cuda/cuda_host_logic_test.cpp.
#pragma once
#include <climits>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "freight/error.h"

namespace freight::cuda {

// Elements per work item: 256 threads take 32 each.
inline constexpr int64_t kMultiTensorChunk = 8192;

struct MultiTensorEntry {
  void* p;        // the parameter (updated in place)
  const void* g;  // its gradient
  void* s1;       // state: SGD momentum buffer or Adam exp_avg (null when absent)
  void* s2;       // state: Adam exp_avg_sq (null when absent)
  int64_t n;      // elements
  int32_t dtype;  // 0: float32, 1: float64
  int32_t aux;    // the step-count slot (SGD: slot << 1, and bit 0 set for a fresh buffer)
};
struct MultiTensorChunk {
  int32_t tensor;  // index into the entries
  int32_t chunk;   // the chunk's number within its tensor
};
static_assert(std::is_trivially_copyable_v<MultiTensorEntry> && sizeof(MultiTensorEntry) == 48);
static_assert(std::is_trivially_copyable_v<MultiTensorChunk> && sizeof(MultiTensorChunk) == 8);

// Byte layout of a table: the entries, then the chunks (offset a multiple of 8).
struct MultiTensorLayout {
  int64_t tensors = 0, chunks = 0;
  size_t chunks_offset() const { return size_t(tensors) * sizeof(MultiTensorEntry); }
  size_t bytes() const { return chunks_offset() + size_t(chunks) * sizeof(MultiTensorChunk); }
};

// Serialises `entries` and their work items into `out` (resized; its capacity is reused from
// call to call). Tensors with no elements get no work items.
inline MultiTensorLayout build_multi_tensor_table(const std::vector<MultiTensorEntry>& entries,
                                                  std::vector<unsigned char>& out) {
  FREIGHT_CHECK(entries.size() < size_t(INT32_MAX), "multi-tensor launch: too many tensors");
  MultiTensorLayout layout;
  layout.tensors = int64_t(entries.size());
  for (const MultiTensorEntry& e : entries) {
    const int64_t k = (e.n + kMultiTensorChunk - 1) / kMultiTensorChunk;
    FREIGHT_CHECK(e.n >= 0 && k <= INT32_MAX, "multi-tensor launch: a tensor is too large");
    layout.chunks += k;
  }
  out.resize(layout.bytes());
  if (!entries.empty()) std::memcpy(out.data(), entries.data(), layout.chunks_offset());
  size_t at = layout.chunks_offset();
  for (size_t t = 0; t < entries.size(); ++t) {
    const int64_t k = (entries[t].n + kMultiTensorChunk - 1) / kMultiTensorChunk;
    for (int64_t c = 0; c < k; ++c) {
      MultiTensorChunk item{int32_t(t), int32_t(c)};
      std::memcpy(out.data() + at, &item, sizeof item);
      at += sizeof item;
    }
  }
  return layout;
}

}  // namespace freight::cuda
