// The batch loader. A worker thread assembles batches (gather, convert, normalise) into a
// bounded queue while the training thread consumes them; plain loops only, so the worker never
// starts an OpenMP team of its own that would compete with the kernels' threads. For a GPU the
// worker stays on the host (it makes no CUDA call but pinned allocations, which cannot disturb
// a graph capture on the training thread) and the training thread queues the uploads.
#include "freight/data/loader.h"

#include <fmt/format.h>

#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <numeric>
#include <optional>
#include <thread>

#include "core/backend.h"
#include "core/philox.h"
#include "data/loader_checks.h"
#include "freight/error.h"

namespace freight::data {

std::vector<int64_t> epoch_order(int64_t n, uint64_t seed, int64_t epoch, bool shuffle) {
  std::vector<int64_t> order(size_t(std::max<int64_t>(n, 0)));
  std::iota(order.begin(), order.end(), 0);
  if (!shuffle) return order;
  // Fisher-Yates driven by Philox: draw i is element(seed, counter base for this epoch, i).
  uint64_t base = uint64_t(epoch) << 36;
  for (int64_t i = n - 1; i > 0; --i) {
    uint64_t r = philox::element(seed, base, uint64_t(n - 1 - i));
    int64_t j = int64_t(r % uint64_t(i + 1));
    std::swap(order[i], order[j]);
  }
  return order;
}

struct Loader::Impl {
  Dataset ds;
  LoaderOptions opt;
  int64_t sample_elems = 0;
  int64_t label_elems = 1;  // labels per sample (1 for classification, T for sequences)
  std::vector<int64_t> order;
  int64_t batches = 0;

  // Producer/consumer state for the current epoch.
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Batch> queue;
  std::thread worker;
  bool stop = false;
  int64_t produced = 0;  // the batch the worker makes first (the epoch's starting batch)
  int64_t consumed = 0;
  std::exception_ptr error;

  // GPU uploads (training thread only): the batch whose copy was queued last.
  struct InFlight {
    Batch batch;  // device tensors
    std::unique_ptr<PendingUpload> x, y;
  };
  std::optional<InFlight> in_flight;
  int64_t taken = 0;  // host batches taken from the worker (GPU path)

  bool gpu() const { return opt.device.is_cuda(); }

  void shuffle(int64_t epoch) { order = epoch_order(ds.size(), opt.seed, epoch, opt.shuffle); }

  // Batch b in host memory (the worker's part).
  Batch make_host(int64_t b) {
    int64_t begin = b * opt.batch_size;
    ShardRows part = shard_of(std::min(opt.batch_size, ds.size() - begin), opt.shard, opt.shards);
    begin += part.offset;
    int64_t count = part.rows;
    Shape s{count};
    Shape sample = ds.sample_shape();
    s.insert(s.end(), sample.begin(), sample.end());
    Shape ls{count};
    ls.insert(ls.end(), ds.labels.shape().begin() + 1, ds.labels.shape().end());
    DType xt = ds.inputs.dtype() == DType::I64 ? DType::I64 : DType::F32;
    Tensor x = opt.host_alloc ? opt.host_alloc(s, xt) : Tensor::empty(s, xt);
    Tensor y = opt.host_alloc ? opt.host_alloc(ls, DType::I64) : Tensor::empty(ls, DType::I64);
    int64_t* py = y.data<int64_t>();
    const int64_t* labels = ds.labels.data<int64_t>();
    for (int64_t i = 0; i < count; ++i) {
      int64_t k = order[begin + i];
      std::memcpy(py + i * label_elems, labels + k * label_elems,
                  size_t(label_elems) * sizeof(int64_t));
    }
    Normalisation norm = normalisation(opt.mean, opt.std);
    float inv_std = norm.inv_std, mean = norm.mean;
    if (xt == DType::I64) {  // token ids: gathered as they are
      const int64_t* src = ds.inputs.data<int64_t>();
      int64_t* px = x.data<int64_t>();
      for (int64_t i = 0; i < count; ++i)
        std::memcpy(px + i * sample_elems, src + order[begin + i] * sample_elems,
                    size_t(sample_elems) * sizeof(int64_t));
    } else if (ds.inputs.dtype() == DType::U8) {
      float* px = x.data<float>();
      // (pixel / 255 − mean) / std as one fused multiply-add per pixel (explicitly fused, so
      // every compiler and the GPU's gather kernel round it the same way).
      float scale = norm.scale, shift = norm.shift;
      const uint8_t* src = ds.inputs.data<uint8_t>();
      for (int64_t i = 0; i < count; ++i) {
        int64_t k = order[begin + i];
        const uint8_t* from = src + k * sample_elems;
        float* to = px + i * sample_elems;
        for (int64_t e = 0; e < sample_elems; ++e) to[e] = std::fma(float(from[e]), scale, shift);
      }
    } else {
      float* px = x.data<float>();
      const float* src = ds.inputs.data<float>();
      for (int64_t i = 0; i < count; ++i) {
        int64_t k = order[begin + i];
        const float* from = src + k * sample_elems;
        float* to = px + i * sample_elems;
        if (mean == 0.0f && inv_std == 1.0f)
          std::memcpy(to, from, size_t(sample_elems) * sizeof(float));
        else
          for (int64_t e = 0; e < sample_elems; ++e) to[e] = (from[e] - mean) * inv_std;
      }
    }
    Batch batch;
    batch.index = b;
    batch.inputs = x;
    batch.labels = y;
    return batch;
  }

  // Batch b where it is used: on a CPU device the host batch itself; on a GPU a synchronous copy
  // (the synchronous mode and the worker of a CPU loader use this).
  Batch make(int64_t b) {
    Batch batch = make_host(b);
    if (gpu()) {
      batch.inputs = batch.inputs.to(opt.device);
      batch.labels = batch.labels.to(opt.device);
    }
    return batch;
  }

  // The next host batch of the epoch: from the worker's queue, or made here without one.
  Batch take_host() {
    if (opt.prefetch <= 0) return make_host(taken++);
    std::unique_lock<std::mutex> lock(mu);
    FREIGHT_CHECK(worker.joinable(), "loader: next() before start_epoch()");
    cv.wait(lock, [&] { return !queue.empty() || error; });
    if (error) std::rethrow_exception(error);
    Batch batch = std::move(queue.front());
    queue.pop_front();
    taken++;
    cv.notify_all();
    return batch;
  }

  // Queues the copy of a host batch to the GPU on the copy stream.
  InFlight upload(Batch host) {
    InFlight f;
    f.batch.index = host.index;
    DeviceBackend& be = backend_for(DeviceType::CUDA);
    auto send = [&](const Tensor& h, Tensor& d, std::unique_ptr<PendingUpload>& pending) {
      d = Tensor::empty(h.shape(), h.dtype(), opt.device);
      if (h.nbytes() > 0)
        pending = be.upload(d.data_ptr(), h.data_ptr(), h.nbytes(), opt.device.index);
    };
    send(host.inputs, f.batch.inputs, f.x);
    send(host.labels, f.batch.labels, f.y);
    return f;  // the host tensors may go: a pinned block stays reserved until its copy ran
  }

  // GPU path of next(): hand out the batch uploaded last, after queueing the next one's copy.
  Batch next_on_gpu() {
    if (!in_flight) in_flight = upload(take_host());
    InFlight current = std::move(*in_flight);
    in_flight.reset();
    if (taken < batches) in_flight = upload(take_host());
    if (current.x) current.x->wait();
    if (current.y) current.y->wait();
    return current.batch;
  }

  void run() {
    try {
      for (int64_t b = produced; b < batches; ++b) {
        {
          std::unique_lock<std::mutex> lock(mu);
          cv.wait(lock, [&] { return stop || int64_t(queue.size()) < opt.prefetch; });
          if (stop) return;
        }
        Batch batch = gpu() ? make_host(b) : make(b);
        std::lock_guard<std::mutex> lock(mu);
        queue.push_back(std::move(batch));
        cv.notify_all();
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu);
      error = std::current_exception();
      cv.notify_all();
    }
  }

  void halt() {
    if (worker.joinable()) {
      {
        std::lock_guard<std::mutex> lock(mu);
        stop = true;
        cv.notify_all();
      }
      worker.join();
    }
    queue.clear();
    in_flight.reset();  // its uploads still order the compute stream behind them
    stop = false;
    error = nullptr;
  }
};

ShardRows shard_of(int64_t batch_rows, int shard, int shards) {
  FREIGHT_CHECK(
      shards >= 1 && shard >= 0 && shard < shards && batch_rows >= 0,
      fmt::format("loader: shard {} of {} of a batch of {} rows", shard, shards, batch_rows));
  int64_t base = batch_rows / shards, extra = batch_rows % shards;
  return {shard * base + std::min<int64_t>(shard, extra), base + (shard < extra ? 1 : 0)};
}

void check_loader_inputs(const Dataset& dataset, const LoaderOptions& options, const char* who) {
  FREIGHT_CHECK(dataset.size() > 0, fmt::format("{}: dataset '{}' is empty", who, dataset.name));
  FREIGHT_CHECK(options.batch_size > 0,
                fmt::format("--batch-size must be positive (got {})", options.batch_size));
  FREIGHT_CHECK(options.shards >= 1 && options.shard >= 0 && options.shard < options.shards,
                fmt::format("{}: shard {} of {}", who, options.shard, options.shards));
  FREIGHT_CHECK(options.batch_size >= options.shards,
                fmt::format("--batch-size {} is the global batch, split over {} ranks: it must "
                            "be at least the number of ranks",
                            options.batch_size, options.shards));
  FREIGHT_CHECK(options.std > 0, fmt::format("{}: normalisation std must be positive", who));
  DType in_t = dataset.inputs.dtype();
  FREIGHT_CHECK(in_t == DType::U8 || in_t == DType::F32 || in_t == DType::I64,
                fmt::format("{}: dataset '{}' inputs are {}; uint8, float32 or int64 expected", who,
                            dataset.name, dtype_name(in_t)));
  FREIGHT_CHECK(dataset.labels.defined() && dataset.labels.dim() >= 1 &&
                    dataset.labels.size(0) == dataset.inputs.size(0),
                fmt::format("{}: dataset '{}' has {} inputs but labels of shape {}", who,
                            dataset.name, dataset.inputs.size(0),
                            dataset.labels.defined() ? shape_str(dataset.labels.shape()) : "[]"));
}

Loader::Loader(const Dataset& dataset, LoaderOptions options) : impl_(std::make_unique<Impl>()) {
  check_loader_inputs(dataset, options, "loader");
  impl_->ds = dataset;
  impl_->ds.inputs = dataset.inputs.contiguous();
  impl_->ds.labels = dataset.labels.to(DType::I64).contiguous();
  impl_->opt = std::move(options);
  impl_->sample_elems = shape_numel(impl_->ds.sample_shape());
  impl_->label_elems = impl_->ds.labels.numel() / std::max<int64_t>(1, dataset.size());
  int64_t n = dataset.size(), bs = impl_->opt.batch_size;
  impl_->batches = impl_->opt.drop_last ? n / bs : (n + bs - 1) / bs;
  FREIGHT_CHECK(impl_->batches > 0,
                fmt::format("loader: --batch-size {} with drop_last leaves no batch of the {} "
                            "samples of '{}'",
                            bs, n, dataset.name));
}

Loader::~Loader() {
  impl_->halt();
}

void Loader::start_epoch(int64_t epoch, int64_t first_batch) {
  FREIGHT_CHECK(first_batch >= 0 && first_batch <= impl_->batches,
                fmt::format("loader: cannot start epoch {} at batch {}: it has {} batches", epoch,
                            first_batch, impl_->batches));
  impl_->halt();
  impl_->shuffle(epoch);
  impl_->produced = impl_->consumed = impl_->taken = first_batch;
  if (impl_->opt.prefetch > 0) impl_->worker = std::thread([this] { impl_->run(); });
}

bool Loader::next(Batch& batch) {
  Impl& m = *impl_;
  if (m.consumed >= m.batches) return false;
  if (m.gpu()) {
    batch = m.next_on_gpu();
    m.consumed++;
    return true;
  }
  if (m.opt.prefetch <= 0) {
    batch = m.make(m.consumed++);
    return true;
  }
  std::unique_lock<std::mutex> lock(m.mu);
  FREIGHT_CHECK(m.worker.joinable(), "loader: next() before start_epoch()");
  m.cv.wait(lock, [&] { return !m.queue.empty() || m.error; });
  if (m.error) std::rethrow_exception(m.error);
  batch = std::move(m.queue.front());
  m.queue.pop_front();
  m.consumed++;
  m.cv.notify_all();
  return true;
}

int64_t Loader::num_batches() const {
  return impl_->batches;
}
int64_t Loader::num_samples() const {
  return impl_->ds.size();
}
const LoaderOptions& Loader::options() const {
  return impl_->opt;
}

}  // namespace freight::data
