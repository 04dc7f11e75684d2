// The training epoch on a GPU (train.cpp runs the CPU's itself). Internal to the library.
//
// No host synchronisation per step: the loss and the correct predictions are accumulated on the
// device (kernels::accumulate_metrics) and read once per log interval and at the end of the
// epoch (or of a stopped epoch), which is also where a diverged loss is detected: a GPU run stops
// at the first of those reads that sees a non-finite loss, not at the step that made it (train()
// checks the weights themselves before any save, so none is written either way). Batches come from
// the Loader (host batches uploaded on the copy stream one ahead) or, with --data-on-device, from a
// DeviceData (gathered on the device).
//
// CUDA graphs (on by default). After `warmup` eager steps with full batches (they create the
// optimizer's buffers and let every library finish its lazy set-up), the next full batch is
// copied into static input and label tensors and the whole step (zero_grad, forward, loss,
// backward, optimizer step, metrics) is captured once as a CUDA graph; every later full batch
// is copied into the same static tensors and the graph replayed. What makes a replay equal to
// an eager step:
//   - memory: the capture's allocations come from a pool private to the graph (block_cache.h),
//     so the addresses baked into the graph stay its own;
//   - the optimizer's learning rate and bias corrections are read from a device tensor filled
//     before each step (Optimizer::use_step_scalars), not baked launch arguments;
//   - dropout draws at the generator's current offset (the backend writes the offset's delta
//     before each replay and advances the generator as an eager step would);
//   - host bookkeeping that an eager step does in forward() and step() is redone for replays:
//     the optimizer's step counts (note_replayed_step) and BatchNorm's num_batches_tracked.
// The host objects that the capture created (autograd nodes, the output and loss tensors) are
// never used after it: a replay reruns GPU work only. The ragged last batch of an epoch runs
// eagerly (its shapes differ), and so does everything when graphs are off.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/backend.h"
#include "data/device_data.h"
#include "freight/data/loader.h"
#include "freight/nn/layers.h"
#include "freight/nn/model_file.h"
#include "freight/nn/module.h"
#include "freight/optim/optimizer.h"
#include "freight/optim/schedule.h"
#include "freight/training.h"

namespace freight::detail {

// Where an epoch starts: at batch 0, or (resumed in the middle) at `first_batch` with the sums
// of the batches before it.
struct EpochStart {
  int64_t first_batch = 0;
  double loss_sum = 0, correct = 0;
  int64_t targets = 0, samples = 0;
};

struct GpuEpochResult {
  double loss_sum = 0, correct = 0;  // the device's sums (those of `start` included)
  int64_t targets = 0, samples = 0;
  int64_t graph_steps = 0;   // steps replayed from the graph (the captured one included)
  int64_t batches_done = 0;  // num_batches() unless stopped
};

class GpuTrainer {
 public:
  struct Settings {
    bool cuda_graph = true;
    bool data_on_device = false;
    int64_t log_interval = 0;  // batches between progress reads (0: about 4 a second)
    int64_t warmup = 3;        // eager full steps before the capture
  };
  GpuTrainer(nn::Module& model, const nn::ModelSpec& spec, optim::Optimizer& opt,
             const data::Dataset& train_set, const data::LoaderOptions& loader_options,
             Settings settings);
  ~GpuTrainer();
  GpuTrainer(const GpuTrainer&) = delete;
  GpuTrainer& operator=(const GpuTrainer&) = delete;

  int64_t num_batches() const;

  // One epoch (0-based `epoch`) from `start`; `step` counts optimizer steps and the schedule
  // steps after each. When `stop` becomes true the epoch ends after the step under way.
  GpuEpochResult run_epoch(int64_t epoch, int64_t epochs, const EpochStart& start,
                           optim::LRScheduler* sched, int64_t& step,
                           const std::function<void(const BatchProgress&)>& on_batch,
                           const std::atomic<bool>* stop = nullptr);

 private:
  void step_body(const Tensor& x, const Tensor& y);  // the work of one step (eager or captured)
  void eager_step(const Tensor& x, const Tensor& y);
  void capture_and_run(const Tensor& x, const Tensor& y);  // x, y: batch already on the device
  void replay(const Tensor& x, const Tensor& y);
  void flush_batch_norm();
  std::vector<double> read_sums();
  // Runs `fn`, turning an out-of-memory error into one that says which batch size would fit.
  void guarded(const std::function<void()>& fn, int64_t batch_rows);

  nn::Module& model_;
  const nn::ModelSpec& spec_;
  optim::Optimizer& opt_;
  Device device_;
  Settings settings_;
  int64_t batch_size_;
  std::unique_ptr<data::Loader> loader_;
  std::unique_ptr<data::DeviceData> device_data_;
  Tensor sums_;  // float64 [2]: loss · targets, correct predictions
  std::vector<nn::BatchNorm*> batch_norms_;
  int64_t pending_batch_norm_ = 0;  // replayed batches not yet counted by the BatchNorm layers
  int64_t eager_full_steps_ = 0;
  // The graph and what it reads and writes at fixed addresses.
  std::unique_ptr<DeviceGraph> graph_;
  Tensor static_x_, static_y_;
  Tensor captured_out_,
      captured_loss_;  // (pool blocks; kept so nothing else is told they are free)
};

}  // namespace freight::detail
