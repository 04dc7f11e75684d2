#include "training/gpu_trainer.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>

#include "freight/autograd.h"
#include "freight/error.h"
#include "freight/runtime.h"
#include "ops/kernels/metrics.h"
#include "training/diverged.h"

namespace freight::detail {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}
}  // namespace

GpuTrainer::GpuTrainer(nn::Module& model, const nn::ModelSpec& spec, optim::Optimizer& opt,
                       const data::Dataset& train_set, const data::LoaderOptions& loader_options,
                       Settings settings)
    : model_(model),
      spec_(spec),
      opt_(opt),
      device_(loader_options.device),
      settings_(settings),
      batch_size_(loader_options.batch_size) {
  FREIGHT_CHECK(device_.is_cuda(), "GpuTrainer: the training device must be a GPU");
  if (settings_.data_on_device) {
    device_data_ = std::make_unique<data::DeviceData>(train_set, loader_options);
  } else {
    data::LoaderOptions lo = loader_options;
    if (!lo.host_alloc) lo.host_alloc = pinned_host_allocator(device_);
    loader_ = std::make_unique<data::Loader>(train_set, lo);
  }
  sums_ = Tensor::zeros({2}, DType::F64, device_);
  for (auto& [name, m] : model_.named_modules())
    if (auto* bn = dynamic_cast<nn::BatchNorm*>(m.get())) batch_norms_.push_back(bn);
  if (settings_.cuda_graph) opt_.use_step_scalars();
}

GpuTrainer::~GpuTrainer() {
  graph_.reset();  // waits for its last replay, then gives its pool back
}

int64_t GpuTrainer::num_batches() const {
  return loader_ ? loader_->num_batches() : device_data_->num_batches();
}

void GpuTrainer::step_body(const Tensor& x, const Tensor& y) {
  opt_.zero_grad();
  Tensor out = model_(x);
  Tensor loss = model_loss(spec_, out, y);
  loss.backward();
  opt_.step();
  NoGradGuard no_grad;
  Tensor rows = out.detach();
  rows = rows.reshape({-1, rows.size(-1)}).contiguous();
  kernels::accumulate_metrics(device_.type, rows, y.reshape({-1}).contiguous(), loss.detach(),
                              double(y.numel()), sums_);
  captured_out_ = out.detach();
  captured_loss_ = loss.detach();
}

void GpuTrainer::eager_step(const Tensor& x, const Tensor& y) {
  flush_batch_norm();  // forward() counts from the host's number
  if (opt_.uses_step_scalars()) opt_.prepare_step();
  step_body(x, y);
  captured_out_ = Tensor();
  captured_loss_ = Tensor();
}

void GpuTrainer::capture_and_run(const Tensor& x, const Tensor& y) {
  flush_batch_norm();
  if (!static_x_.defined()) {
    static_x_ = Tensor::empty(x.shape(), x.dtype(), device_);
    static_y_ = Tensor::empty(y.shape(), y.dtype(), device_);
  }
  static_x_.copy_(x);
  static_y_.copy_(y);
  opt_.prepare_step();
  graph_ = backend_for(DeviceType::CUDA).capture(device_.index, [&] {
    step_body(static_x_, static_y_);
  });
  // The capture ran the step's host side (optimizer counts, BatchNorm's counter, the random
  // offsets); this first replay is its device side.
  graph_->replay();
}

void GpuTrainer::replay(const Tensor& x, const Tensor& y) {
  if (x.defined()) {  // (--data-on-device gathers straight into the static tensors)
    static_x_.copy_(x);
    static_y_.copy_(y);
  }
  opt_.prepare_step();
  graph_->replay();
  opt_.note_replayed_step();
  if (!batch_norms_.empty()) ++pending_batch_norm_;
}

void GpuTrainer::flush_batch_norm() {
  if (pending_batch_norm_ == 0) return;
  for (nn::BatchNorm* bn : batch_norms_) bn->add_tracked_batches(pending_batch_norm_);
  pending_batch_norm_ = 0;
}

std::vector<double> GpuTrainer::read_sums() {
  return sums_.to_double_vector();
}

void GpuTrainer::guarded(const std::function<void()>& fn, int64_t batch_rows) {
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

GpuEpochResult GpuTrainer::run_epoch(int64_t epoch, int64_t epochs, const EpochStart& start,
                                     optim::LRScheduler* sched, int64_t& step,
                                     const std::function<void(const BatchProgress&)>& on_batch,
                                     const std::atomic<bool>* stop) {
  if (loader_)
    loader_->start_epoch(epoch, start.first_batch);
  else
    device_data_->start_epoch(epoch);
  if (start.first_batch > 0)  // the sums of the batches run before the interruption
    sums_.copy_(Tensor::from_vector(std::vector<double>{start.loss_sum, start.correct}, {2}));
  else
    sums_.zero_();
  GpuEpochResult r;
  r.targets = start.targets;
  r.samples = start.samples;
  const int64_t batches = num_batches();
  auto t0 = Clock::now();
  auto last_read = t0;
  int64_t checked = start.first_batch;  // batches whose loss has been seen finite
  int64_t checked_step = step;
  auto check = [&](const std::vector<double>& v, int64_t batch_no) {
    if (!std::isfinite(v[0]))
      throw DivergedError(fmt::format(
          "training diverged: the loss became {} in epoch {} between batches {} and {} of {} "
          "(steps {} to {}; a GPU run reads its loss only every few batches, so as not to wait "
          "for the device at each step) at learning rate {:g}: try a smaller --lr",
          v[0], epoch + 1, checked + 1, batch_no, batches, checked_step + 1, step, opt_.lr()));
    checked = batch_no;
    checked_step = step;
  };
  int64_t b = start.first_batch;
  for (; b < batches; ++b) {
    if (b > start.first_batch && stop && stop->load(std::memory_order_relaxed)) break;
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
    bool full = rows == batch_size_;
    if (graph_ && full) {
      if (device_data_) device_data_->gather(b, static_x_, static_y_);
      replay(x, y);
      y = static_y_;
      ++r.graph_steps;
    } else {
      if (device_data_) {
        data::Batch batch = device_data_->batch(b);
        x = batch.inputs;
        y = batch.labels;
      }
      if (settings_.cuda_graph && full && eager_full_steps_ >= settings_.warmup) {
        guarded([&] { capture_and_run(x, y); }, rows);
        ++r.graph_steps;
      } else {
        guarded([&] { eager_step(x, y); }, rows);
        if (full) ++eager_full_steps_;
      }
    }
    if (sched) sched->step();
    ++step;
    r.targets += y.numel();
    r.samples += rows;
    bool last = b + 1 == batches;
    if (on_batch && !last) {
      bool read = settings_.log_interval > 0 ? (b + 1) % settings_.log_interval == 0
                                             : seconds_since(last_read) >= 0.25;
      if (read) {
        std::vector<double> v = read_sums();
        check(v, b + 1);
        last_read = Clock::now();
        on_batch(BatchProgress{epoch + 1, epochs, b + 1, batches, v[0] / double(r.targets),
                               v[1] / double(r.targets), seconds_since(t0), r.samples});
      }
    }
  }
  r.batches_done = b;
  flush_batch_norm();
  std::vector<double> v = read_sums();  // waits for the epoch's work
  check(v, b);
  r.loss_sum = v[0];
  r.correct = v[1];
  if (on_batch)
    on_batch(
        BatchProgress{epoch + 1, epochs, b, batches, r.targets ? v[0] / double(r.targets) : 0.0,
                      r.targets ? v[1] / double(r.targets) : 0.0, seconds_since(t0), r.samples});
  return r;
}

}  // namespace freight::detail
