// Batches from a Dataset: seeded shuffling (the order of epoch e is a pure function of the
// seed and e, so a resumed run sees the same batches), uint8 → float normalisation, and a
// background thread that prepares the next batches while the current one trains.
//
// For a GPU the worker assembles batches in host memory (pinned when host_alloc allocates
// pinned tensors, see freight::pinned_host_allocator), and next() uploads them on the device's
// copy stream one batch ahead: while the step of batch k is queued on the compute stream, batch
// k + 1 is already on its way, and the compute stream waits (on the device, not the host) for
// a batch's copy before it reads it.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "freight/data/dataset.h"
#include "freight/data/normalisation.h"
#include "freight/device.h"

namespace freight::data {

struct Batch {
  Tensor inputs;      // float32 [B, ...] (int64 for token datasets) on the loader's device
  Tensor labels;      // int64 [B] (or [B, T] for sequence labels)
  int64_t index = 0;  // batch number within the epoch
};

struct LoaderOptions {
  int64_t batch_size = 64;
  bool shuffle = true;
  uint64_t seed = 0;
  bool drop_last = false;
  // inputs are mapped as (pixel / 255 − mean) / std for uint8 data, (x − mean) / std for float.
  double mean = 0.0;
  double std = 1.0;
  int prefetch = 2;  // batches prepared ahead by the background thread (0: none, synchronous)
  Device device = Device::cpu();
  // Allocates the host staging tensor of a batch (the GPU backend passes a pinned-memory
  // allocator here so host-to-device copies can run asynchronously). Default: Tensor::empty.
  std::function<Tensor(const Shape&, DType)> host_alloc;
  // Data parallelism: this process is shard `shard` of `shards` (its rank among the ranks).
  // batch_size stays the global batch and the batches the same; each loader yields its shard of
  // every batch (shard_of), so the shards of batch b, concatenated in rank order, are batch b.
  int shard = 0, shards = 1;
};

// The rows [offset, offset + rows) of a batch of `batch_rows` rows that shard `shard` of
// `shards` takes: an even split, the first batch_rows % shards shards one row more. A shard may
// get no row (a last batch shorter than the number of shards).
struct ShardRows {
  int64_t offset = 0, rows = 0;
};
ShardRows shard_of(int64_t batch_rows, int shard, int shards);

// The sample order of epoch `epoch` (0-based) over n samples: 0..n−1 without shuffling, else a
// Fisher-Yates shuffle driven by Philox(seed). A pure function of its arguments, shared by the
// Loader and by --data-on-device, so both (and a resumed run) see the same batches.
std::vector<int64_t> epoch_order(int64_t n, uint64_t seed, int64_t epoch, bool shuffle = true);

class Loader {
 public:
  Loader(const Dataset& dataset, LoaderOptions options);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // Starts epoch `epoch` (0-based): fixes its order and starts prefetching. A run resumed in the
  // middle of an epoch starts at batch `first_batch`: the order is the epoch's own (a function of
  // the seed and the epoch), so batch k is the batch k the interrupted run would have seen.
  void start_epoch(int64_t epoch, int64_t first_batch = 0);
  // The next batch of the current epoch; false at its end.
  bool next(Batch& batch);
  int64_t num_batches() const;
  int64_t num_samples() const;
  const LoaderOptions& options() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace freight::data
