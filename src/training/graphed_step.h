// CUDA-graph capture as an optional wrapper around a TrainStep (train_step.h). After `warmup`
// eager steps with full batches (they create the optimizer's buffers and let every library
// finish its lazy set-up), the next full batch is copied into static input and label tensors
// and the step is captured once as a CUDA graph; every later full batch is copied into the same
// static tensors and the graph replayed. What makes a replay equal to an eager step:
//   - memory: the capture's allocations come from a pool private to the graph (block_cache.h),
//     so the addresses baked into the graph stay its own;
//   - every value that changes from step to step is read and advanced on the device by the
//     step's own kernels (train_step.h), never a baked launch argument or a host-side count;
//   - dropout draws at the generator's current offset (the backend writes the offset's delta
//     before each replay and advances the generator as an eager step would).
// The host objects that the capture created (autograd nodes, the output and loss tensors) are
// never used after it: a replay reruns GPU work only. Batches of another shape (the ragged last
// one of an epoch) run eagerly.
#pragma once
#include <cstdint>
#include <memory>

#include "core/backend.h"
#include "training/train_step.h"

namespace freight::detail {

class GraphedStep {
 public:
  GraphedStep(TrainStep& step, int64_t warmup);
  ~GraphedStep();
  GraphedStep(const GraphedStep&) = delete;
  GraphedStep& operator=(const GraphedStep&) = delete;

  bool captured() const { return graph_ != nullptr; }
  // The input and label tensors a replay reads (defined once captured): a batch source may
  // gather straight into them and call replay() with undefined x and y.
  Tensor& static_x() { return static_x_; }
  Tensor& static_y() { return static_y_; }

  // One step on a full batch: eager while warming up, then the capture (and its first replay),
  // then replays. Returns whether the graph ran it.
  bool full_batch(const Tensor& x, const Tensor& y);
  // A replay of the captured step on (x, y), or on what the static tensors hold when x is
  // undefined.
  void replay(const Tensor& x, const Tensor& y);

 private:
  TrainStep& step_;
  int64_t warmup_;
  int64_t eager_steps_ = 0;
  std::unique_ptr<DeviceGraph> graph_;
  Tensor static_x_, static_y_;
  TrainStep::Outputs captured_;  // (pool blocks; kept so nothing else is told they are free)
};

}  // namespace freight::detail
