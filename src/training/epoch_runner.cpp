#include "training/epoch_runner.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <vector>

#include "freight/error.h"
#include "freight/runtime.h"
#include "training/diverged.h"

namespace freight::detail {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}
}  // namespace

EpochRunner::EpochRunner(nn::Module& model, const nn::ModelSpec& spec, optim::Optimizer& opt,
                         const data::Dataset& train_set, const data::LoaderOptions& loader_options,
                         Settings settings)
    : opt_(opt),
      device_(loader_options.device),
      settings_(settings),
      batch_size_(loader_options.batch_size),
      shards_(loader_options.shards),
      samples_(train_set.size()),
      step_(model, spec, opt, loader_options.device, settings.reducer) {
  FREIGHT_CHECK(device_.is_cuda() || (!settings_.cuda_graph && !settings_.data_on_device),
                "EpochRunner: CUDA graphs and data on the device need a GPU");
  FREIGHT_CHECK((shards_ > 1) == (settings_.reducer != nullptr),
                "EpochRunner: a data-parallel shard needs the reducer, and only it");
  FREIGHT_CHECK(shards_ == 1 || !settings_.cuda_graph,
                "EpochRunner: CUDA graphs are not used in data-parallel training");
  FREIGHT_CHECK(settings_.accumulate >= 1 && (settings_.accumulate == 1 || !settings_.cuda_graph),
                "EpochRunner: CUDA graphs capture whole steps, not accumulated micro-batches");
  if (settings_.data_on_device) {
    device_data_ = std::make_unique<data::DeviceData>(train_set, loader_options);
  } else {
    data::LoaderOptions lo = loader_options;
    if (device_.is_cuda() && !lo.host_alloc) lo.host_alloc = pinned_host_allocator(device_);
    loader_ = std::make_unique<data::Loader>(train_set, lo);
  }
  if (settings_.cuda_graph) graphed_ = std::make_unique<GraphedStep>(step_, settings_.warmup);
}

EpochRunner::~EpochRunner() = default;

int64_t EpochRunner::num_batches() const {
  return loader_ ? loader_->num_batches() : device_data_->num_batches();
}

int64_t EpochRunner::steps_per_epoch() const {
  return (num_batches() + settings_.accumulate - 1) / settings_.accumulate;
}

void EpochRunner::guarded(const std::function<void()>& fn, int64_t batch_rows) {
  size_t before = memory_stats(device_).in_use;
  try {
    fn();
  } catch (const OutOfMemoryError& e) {
    size_t step_bytes = e.in_use() > before ? e.in_use() - before : 0;
    throw Error(fmt::format(
        "{}\n{}", e.what(),
        out_of_memory_advice(e.requested(), e.free_bytes(), step_bytes, before, batch_rows)));
  }
}

EpochResult EpochRunner::run_epoch(int64_t epoch, int64_t epochs, const EpochStart& start,
                                   optim::LRScheduler* sched, int64_t& step,
                                   const std::function<void(const BatchProgress&)>& on_batch,
                                   const std::atomic<bool>* stop) {
  if (loader_)
    loader_->start_epoch(epoch, start.first_batch);
  else
    device_data_->start_epoch(epoch);
  step_.reset_sums(start.loss_sum, start.correct);  // those of the batches before a resume
  EpochResult r;
  r.targets = start.targets;
  r.samples = start.samples;
  const int64_t batches = num_batches();
  const bool read_every_batch = device_.is_cpu();  // (host memory: a read costs nothing)
  auto t0 = Clock::now();
  auto last_read = t0;
  auto seconds = [&] { return start.seconds + seconds_since(t0); };
  // Samples of the epoch by all ranks, for the progress report's speed (a resumed epoch's
  // earlier samples are rank 0's, which reports).
  int64_t global_samples = start.samples;
  int64_t checked = start.first_batch;  // batches whose loss has been seen finite
  int64_t checked_step = step;
  double step_lr = opt_.lr();  // the learning rate of the last step
  auto check = [&](const std::vector<double>& v, int64_t batch_no) {
    if (!std::isfinite(v[0])) {
      if (batch_no == checked + 1)
        throw DivergedError(fmt::format(
            "training diverged: the loss is {} at epoch {}, batch {} of {} (step {}) at learning "
            "rate {:g} (--lr {:g}): try a smaller --lr",
            v[0], epoch + 1, batch_no, batches, step, step_lr, settings_.run_lr));
      throw DivergedError(fmt::format(
          "training diverged: the loss became {} in epoch {} between batches {} and {} of {} "
          "(steps {} to {}; a GPU run reads its loss only every few batches, so as not to wait "
          "for the device at each step) at learning rate {:g} (--lr {:g}): try a smaller --lr",
          v[0], epoch + 1, checked + 1, batch_no, batches, checked_step + 1, step, step_lr,
          settings_.run_lr));
    }
    checked = batch_no;
    checked_step = step;
  };
  const int64_t k = settings_.accumulate;
  FREIGHT_CHECK(start.first_batch % k == 0,
                fmt::format("an epoch accumulating {} batches per step cannot start at batch {}", k,
                            start.first_batch));
  auto global_rows = [&](int64_t batch) {
    return std::min(batch_size_, samples_ - batch * batch_size_);
  };
  int64_t group_rows = 0;  // the rows of every rank in the current group of k batches
  int64_t b = start.first_batch;
  for (; b < batches; ++b) {
    const bool first = b % k == 0, last = (b + 1) % k == 0 || b + 1 == batches;
    if (first && b > start.first_batch && stop && stop->load(std::memory_order_relaxed)) break;
    if (first) {
      group_rows = 0;
      for (int64_t j = b; j < std::min(b + k, batches); ++j) group_rows += global_rows(j);
    }
    Tensor x, y;
    int64_t rows = 0;
    if (loader_) {
      data::Batch batch;
      FREIGHT_CHECK(loader_->next(batch), "loader: fewer batches than announced");
      x = batch.inputs;
      y = batch.labels;
      rows = y.size(0);
    } else {
      rows = device_data_->batch_rows(b);
    }
    const bool full = rows == batch_size_;
    step_lr = opt_.lr();
    global_samples += global_rows(b);
    // This rank's share of the step's samples: its rows over the group's rows.
    const bool plain = shards_ == 1 && k == 1;
    const double weight = double(rows) / double(group_rows);
    if (graphed_ && graphed_->captured() && full && device_data_) {
      device_data_->gather(b, graphed_->static_x(), graphed_->static_y());
      graphed_->replay(Tensor(), Tensor());
      y = graphed_->static_y();
      ++r.graph_steps;
    } else {
      if (device_data_) {
        data::Batch batch = device_data_->batch(b);
        x = batch.inputs;
        y = batch.labels;
      }
      if (graphed_ && full) {
        bool graphed = false;
        guarded([&] { graphed = graphed_->full_batch(x, y); }, rows);
        if (graphed) ++r.graph_steps;
      } else if (rows == 0) {
        step_.idle_step(first, last);
      } else if (!plain) {
        guarded([&] { step_(x, y, weight, first, last); }, rows);
      } else {
        guarded([&] { step_(x, y); }, rows);
      }
    }
    if (last) {
      if (sched) sched->step();
      ++step;
    }
    r.targets += y.numel();
    r.samples += rows;
    // A GPU reads only for a progress report, at the log interval (or about 4 times a second).
    const bool read = b + 1 < batches &&
                      (read_every_batch || (on_batch && (settings_.log_interval > 0
                                                             ? (b + 1) % settings_.log_interval == 0
                                                             : seconds_since(last_read) >= 0.25)));
    if (read) {
      std::vector<double> v = step_.sums().to_double_vector();
      check(v, b + 1);
      last_read = Clock::now();
      if (on_batch)
        on_batch(BatchProgress{
            epoch + 1, epochs, b + 1, batches, r.targets ? v[0] / double(r.targets) : 0.0,
            r.targets ? v[1] / double(r.targets) : 0.0, seconds(), global_samples});
    }
  }
  r.batches_done = b;
  r.last_lr = step_lr;
  std::vector<double> v = step_.sums().to_double_vector();  // waits for the epoch's work
  check(v, b);
  r.loss_sum = v[0];
  r.correct = v[1];
  if (on_batch)
    on_batch(BatchProgress{epoch + 1, epochs, b, batches,
                           r.targets ? v[0] / double(r.targets) : 0.0,
                           r.targets ? v[1] / double(r.targets) : 0.0, seconds(), global_samples});
  return r;
}

}  // namespace freight::detail
