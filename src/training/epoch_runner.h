// The training epoch, on every device: batches from the Loader (on a GPU, host batches uploaded
// on the copy stream one ahead) or, with --data-on-device, gathered on the GPU from a DeviceData;
// each one runs the same TrainStep (train_step.h), through a GraphedStep when CUDA graphs are on.
// Internal to the library; train.cpp drives it.
//
// The step never waits for the host: the loss and the correct predictions are accumulated where
// the model runs and read at progress points, which is also where a diverged loss is detected.
// On the CPU the sums are in host memory, so they are read after every batch (a diverged run
// stops at the step that made the loss non-finite, and progress is reported per batch); on a GPU
// every --log-interval batches or about four times a second, and at the end of the epoch (or of
// a stopped one), so a GPU run stops at the first read that sees a non-finite loss. train()
// checks the weights themselves before any save, so nothing non-finite is written either way.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>

#include "data/device_data.h"
#include "freight/data/loader.h"
#include "freight/nn/model_file.h"
#include "freight/nn/module.h"
#include "freight/optim/optimizer.h"
#include "freight/optim/schedule.h"
#include "freight/training.h"
#include "training/graphed_step.h"
#include "training/train_step.h"

namespace freight::detail {

// Where an epoch starts: at batch 0, or (resumed in the middle) at `first_batch` with the sums
// and the seconds of the batches before it.
struct EpochStart {
  int64_t first_batch = 0;
  double loss_sum = 0, correct = 0;
  int64_t targets = 0, samples = 0;
  double seconds = 0;
};

struct EpochResult {
  double loss_sum = 0, correct = 0;  // the sums (those of `start` included)
  int64_t targets = 0, samples = 0;
  int64_t graph_steps = 0;  // steps replayed from the graph (the captured one included)
  // (In a data-parallel job the sums, targets and samples are this rank's.)
  int64_t batches_done = 0;  // num_batches() unless stopped
  // The learning rate of the epoch's last step. The optimizer's rate after the epoch is the next
  // step's (a schedule has already moved on), and after the last epoch no step uses it: a
  // OneCycle schedule's cosine, evaluated one step past its end, rises again there.
  double last_lr = 0;
};

class EpochRunner {
 public:
  struct Settings {
    bool cuda_graph = false;  // a GPU only
    bool data_on_device = false;
    int64_t log_interval = 0;  // GPU: batches between progress reads (0: about 4 a second)
    int64_t warmup = 3;        // eager full steps before the capture
    double run_lr = 0;         // the run's --lr, for the divergence message
    // A data-parallel job: the gradient sums over the ranks. The loader options' shard and
    // shards say which part of each global batch this rank trains on.
    dist::Reducer* reducer = nullptr;
    // Gradient accumulation: one optimizer step per `accumulate` batches (the last group of an
    // epoch may be shorter), equal to one step on all their samples at once.
    int64_t accumulate = 1;
  };
  EpochRunner(nn::Module& model, const nn::ModelSpec& spec, optim::Optimizer& opt,
              const data::Dataset& train_set, const data::LoaderOptions& loader_options,
              Settings settings);
  ~EpochRunner();
  EpochRunner(const EpochRunner&) = delete;
  EpochRunner& operator=(const EpochRunner&) = delete;

  int64_t num_batches() const;
  int64_t steps_per_epoch() const;  // optimizer steps: ceil(batches / accumulate)

  // One epoch (0-based `epoch`) from `start` (a group's first batch); `step` counts optimizer
  // steps and the schedule steps after each. When `stop` becomes true the epoch ends after the
  // optimizer step under way.
  EpochResult run_epoch(int64_t epoch, int64_t epochs, const EpochStart& start,
                        optim::LRScheduler* sched, int64_t& step,
                        const std::function<void(const BatchProgress&)>& on_batch,
                        const std::atomic<bool>* stop = nullptr);

 private:
  // Runs `fn`, turning an out-of-memory error into one that says which batch size would fit.
  void guarded(const std::function<void()>& fn, int64_t batch_rows);

  optim::Optimizer& opt_;
  Device device_;
  Settings settings_;
  int64_t batch_size_;
  int shards_ = 1;
  int64_t samples_ = 0;  // of the whole dataset (every rank's)
  std::unique_ptr<data::Loader> loader_;
  std::unique_ptr<data::DeviceData> device_data_;
  TrainStep step_;
  std::unique_ptr<GraphedStep> graphed_;
};

}  // namespace freight::detail
