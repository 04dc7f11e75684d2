// --data-on-device: a whole dataset resident in GPU memory (uint8 images stay uint8: Fashion-
// MNIST's 60,000 images take 47 MB), with each epoch's order uploaded once (the Loader's order,
// data::epoch_order) and every batch gathered and normalised on the device by one kernel per
// tensor: no host work and no host-to-device copy per batch. Internal to the library (the
// trainer uses it).
#pragma once
#include <cstdint>

#include "freight/data/dataset.h"
#include "freight/data/loader.h"

namespace freight::data {

class DeviceData {
 public:
  // Copies `dataset` to options.device (meant for a GPU; any device works, which is how the
  // host tests compare it with the Loader). Uses batch_size, shuffle, seed, drop_last, mean and
  // std of `options` as the Loader would.
  DeviceData(const Dataset& dataset, const LoaderOptions& options);

  // Fixes the order of epoch `epoch` (0-based): computed on the host, uploaded once.
  void start_epoch(int64_t epoch);
  int64_t num_batches() const { return batches_; }
  int64_t num_samples() const { return n_; }
  int64_t batch_rows(int64_t b) const;    // this shard's rows of batch b (the last may be short)
  Shape input_shape(int64_t rows) const;  // [rows, ...] of a batch's inputs
  Shape label_shape(int64_t rows) const;
  DType input_dtype() const;  // float32 (int64 for token datasets)
  // Gathers batch b of the current epoch into x and y (shapes from input_shape/label_shape of
  // batch_rows(b), on the device: a training step's static buffers, say), queued on the device.
  void gather(int64_t b, Tensor& x, Tensor& y) const;
  // Batch b in fresh tensors.
  Batch batch(int64_t b) const;
  size_t bytes() const;  // device memory held by the data and the order

 private:
  LoaderOptions opt_;
  Tensor inputs_, labels_, order_;
  int64_t n_ = 0, batches_ = 0;
};

}  // namespace freight::data
