// Gradients summed over the ranks of a data-parallel job, in buckets, while backward runs.
//
// The parameters are laid out in buckets: flat buffers filled in reverse parameter order (the
// order backward reaches them: the last layer first), the first bucket small (1 MiB) so that
// communication starts early, the others up to `bucket_bytes`. Each parameter's gradient is a
// view into its bucket (prepare() sets them), so backward accumulates straight into the flat
// buffers and no copy is needed around the sum. A hook on each parameter
// (set_grad_accumulated_hook) counts its bucket down; a bucket whose gradients are all in starts
// its in-place sum over the ranks at once, strictly in bucket order (every rank issues the same
// collectives in the same order, whatever order its backward finished them in). finish() starts
// the buckets left (those with a parameter that got no gradient this step: its zeros are summed
// too) and waits for every sum.
//
// The sum, not the mean: each rank seeds its backward with its share of the global batch's
// targets (train_step.h), so the sum is the gradient of one process on the whole batch.
//
// The layout depends only on the parameters' shapes and order, so it is the same on every rank
// (the model check at start makes sure of that). On the CPU the sums are MPI's, moved by the host
// (progress() at each hook); on a GPU they are NCCL's (DeviceBackend::rank_sums), queued behind
// the backward kernels on a stream of their own, and the optimizer's kernels queue behind them.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/backend.h"
#include "dist/communicator.h"
#include "freight/tensor.h"

namespace freight::dist {

class Reducer {
 public:
  // bucket_bytes 0: one bucket, summed by finish() after backward (no overlap).
  Reducer(std::vector<Tensor> params, int64_t bucket_bytes);
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // Before the step's backward (in place of zero_grad): zeroes the buckets and makes each
  // parameter's gradient its view into them.
  void prepare();
  // Gradient accumulation over micro-batches: after prepare(), hold() makes the backward passes
  // that follow add into the buckets without summing anything over the ranks; release() before
  // the group's last backward lets its hooks start the buckets again.
  void hold();
  void release();
  // After backward: starts the buckets left, in order, and waits for all the sums. `step` is
  // named in a timeout's message.
  void finish(int64_t step);

  size_t num_buckets() const { return buckets_.size(); }
  std::vector<int64_t> bucket_elements() const;
  // Buckets whose sum backward started (the rest were started by finish()), over all steps.
  int64_t started_during_backward() const { return early_; }

 private:
  struct Bucket {
    Tensor flat;
    std::vector<size_t> params;  // indices into params_
    std::vector<int64_t> offsets;
    size_t pending = 0;  // gradients not yet accumulated this step
  };
  void ready(size_t param);
  void start_ready_in_order();
  void start(Bucket& b);

  std::vector<Tensor> params_;
  std::vector<Tensor> views_;
  std::vector<size_t> bucket_of_;
  std::vector<Bucket> buckets_;
  size_t next_ = 0;  // the next bucket to start
  bool overlap_ = true;
  bool in_backward_ = false;
  int64_t early_ = 0;
  AsyncSums sums_;                         // the CPU's
  std::unique_ptr<RankSums> device_sums_;  // a GPU's
};

}  // namespace freight::dist
