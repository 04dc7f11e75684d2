// The batch loader. A worker thread assembles batches (gather, convert, normalise) into a
// bounded queue while the training thread consumes them; plain loops only, so the worker never
// starts an OpenMP team of its own that would compete with the kernels' threads.
#include "freight/data/loader.h"

#include <fmt/format.h>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <numeric>
#include <thread>

#include "core/philox.h"
#include "freight/error.h"

namespace freight::data {

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
  int64_t produced = 0;  // batches made (synchronous mode too)
  int64_t consumed = 0;
  std::exception_ptr error;

  void shuffle(int64_t epoch) {
    int64_t n = ds.size();
    order.resize(n);
    std::iota(order.begin(), order.end(), 0);
    if (!opt.shuffle) return;
    // Fisher-Yates driven by Philox: draw i is element(seed, counter base for this epoch, i).
    uint64_t base = uint64_t(epoch) << 36;
    for (int64_t i = n - 1; i > 0; --i) {
      uint64_t r = philox::element(opt.seed, base, uint64_t(n - 1 - i));
      int64_t j = int64_t(r % uint64_t(i + 1));
      std::swap(order[i], order[j]);
    }
  }

  Batch make(int64_t b) {
    int64_t begin = b * opt.batch_size;
    int64_t count = std::min(opt.batch_size, ds.size() - begin);
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
    float inv_std = float(1.0 / opt.std), mean = float(opt.mean);
    if (xt == DType::I64) {  // token ids: gathered as they are
      const int64_t* src = ds.inputs.data<int64_t>();
      int64_t* px = x.data<int64_t>();
      for (int64_t i = 0; i < count; ++i)
        std::memcpy(px + i * sample_elems, src + order[begin + i] * sample_elems,
                    size_t(sample_elems) * sizeof(int64_t));
    } else if (ds.inputs.dtype() == DType::U8) {
      float* px = x.data<float>();
      // (pixel / 255 − mean) / std as one multiply-add per pixel.
      float scale = inv_std / 255.0f, shift = -mean * inv_std;
      const uint8_t* src = ds.inputs.data<uint8_t>();
      for (int64_t i = 0; i < count; ++i) {
        int64_t k = order[begin + i];
        const uint8_t* from = src + k * sample_elems;
        float* to = px + i * sample_elems;
        for (int64_t e = 0; e < sample_elems; ++e) to[e] = float(from[e]) * scale + shift;
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
    batch.inputs = x.to(opt.device);
    batch.labels = y.to(opt.device);
    return batch;
  }

  void run() {
    try {
      for (int64_t b = 0; b < batches; ++b) {
        {
          std::unique_lock<std::mutex> lock(mu);
          cv.wait(lock, [&] { return stop || int64_t(queue.size()) < opt.prefetch; });
          if (stop) return;
        }
        Batch batch = make(b);
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
    stop = false;
    error = nullptr;
  }
};

Loader::Loader(const Dataset& dataset, LoaderOptions options) : impl_(std::make_unique<Impl>()) {
  FREIGHT_CHECK(dataset.size() > 0, fmt::format("loader: dataset '{}' is empty", dataset.name));
  FREIGHT_CHECK(options.batch_size > 0,
                fmt::format("--batch-size must be positive (got {})", options.batch_size));
  FREIGHT_CHECK(options.std > 0, "loader: normalisation std must be positive");
  DType in_t = dataset.inputs.dtype();
  FREIGHT_CHECK(in_t == DType::U8 || in_t == DType::F32 || in_t == DType::I64,
                fmt::format("loader: dataset '{}' inputs are {}; uint8, float32 or int64 "
                            "expected",
                            dataset.name, dtype_name(in_t)));
  FREIGHT_CHECK(dataset.labels.defined() && dataset.labels.dim() >= 1 &&
                    dataset.labels.size(0) == dataset.inputs.size(0),
                fmt::format("loader: dataset '{}' has {} inputs but labels of shape {}",
                            dataset.name, dataset.inputs.size(0),
                            dataset.labels.defined() ? shape_str(dataset.labels.shape()) : "[]"));
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

Loader::~Loader() { impl_->halt(); }

void Loader::start_epoch(int64_t epoch) {
  impl_->halt();
  impl_->shuffle(epoch);
  impl_->produced = impl_->consumed = 0;
  if (impl_->opt.prefetch > 0) impl_->worker = std::thread([this] { impl_->run(); });
}

bool Loader::next(Batch& batch) {
  Impl& m = *impl_;
  if (m.consumed >= m.batches) return false;
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

int64_t Loader::num_batches() const { return impl_->batches; }
int64_t Loader::num_samples() const { return impl_->ds.size(); }
const LoaderOptions& Loader::options() const { return impl_->opt; }

}  // namespace freight::data
