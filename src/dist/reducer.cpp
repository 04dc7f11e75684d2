#include "dist/reducer.h"

#include <fmt/format.h>

#include "dist/device_sums.h"
#include "freight/autograd.h"
#include "freight/error.h"

namespace freight::dist {

namespace {
constexpr int64_t kFirstBucketBytes = int64_t(1) << 20;
}

Reducer::Reducer(std::vector<Tensor> params, int64_t bucket_bytes) : params_(std::move(params)) {
  FREIGHT_CHECK(bucket_bytes >= 0,
                fmt::format("--bucket-mb must be ≥ 0 (got {} bytes)", bucket_bytes));
  overlap_ = bucket_bytes > 0;
  bucket_of_.assign(params_.size(), 0);
  views_.resize(params_.size());
  // Reverse order: backward produces the gradients of the last layers first.
  std::vector<std::vector<size_t>> groups(1);
  int64_t bytes = 0;
  for (size_t k = params_.size(); k-- > 0;) {
    const Tensor& p = params_[k];
    FREIGHT_CHECK(
        p.device() == params_.back().device(),
        fmt::format("data-parallel training: parameter {} is on {}, parameter {} on "
                    "{}; a rank's parameters must share one device",
                    k, p.device().str(), params_.size() - 1, params_.back().device().str()));
    FREIGHT_CHECK(p.dtype() == params_.back().dtype(),
                  "data-parallel training: the parameters must share one dtype");
    int64_t b = p.numel() * int64_t(dtype_size(p.dtype()));
    int64_t limit = groups.size() == 1 ? std::min(kFirstBucketBytes, bucket_bytes) : bucket_bytes;
    if (overlap_ && !groups.back().empty() && bytes + b > limit) {
      groups.emplace_back();
      bytes = 0;
    }
    groups.back().push_back(k);
    bytes += b;
  }
  for (const std::vector<size_t>& g : groups) {
    if (g.empty()) continue;
    Bucket bucket;
    int64_t n = 0;
    for (size_t k : g) {
      bucket.params.push_back(k);
      bucket.offsets.push_back(n);
      n += params_[k].numel();
    }
    bucket.flat = Tensor::zeros({n}, params_[g.front()].dtype(), params_[g.front()].device());
    NoGradGuard no_grad;
    for (size_t i = 0; i < g.size(); ++i) {
      size_t k = g[i];
      views_[k] = bucket.flat.slice(0, bucket.offsets[i], bucket.offsets[i] + params_[k].numel())
                      .view(params_[k].shape());
      bucket_of_[k] = buckets_.size();
    }
    buckets_.push_back(std::move(bucket));
  }
  for (size_t k = 0; k < params_.size(); ++k)
    set_grad_accumulated_hook(params_[k], [this, k] { ready(k); });
  // On a GPU the sums are NCCL's, queued on the device; on the CPU MPI's, polled by the host.
  const Device device = params_.empty() ? Device::cpu() : params_.front().device();
  if (!device.is_cpu()) device_sums_ = device_rank_sums(device);
}

Reducer::~Reducer() {
  for (const Tensor& p : params_) set_grad_accumulated_hook(p, nullptr);
}

std::vector<int64_t> Reducer::bucket_elements() const {
  std::vector<int64_t> v;
  for (const Bucket& b : buckets_) v.push_back(b.flat.numel());
  return v;
}

void Reducer::prepare() {
  FREIGHT_CHECK(sums_.pending() == 0, "Reducer::prepare: the last step's sums are unfinished");
  for (Bucket& b : buckets_) {
    b.flat.zero_();
    b.pending = b.params.size();
  }
  for (size_t k = 0; k < params_.size(); ++k) params_[k].set_grad(views_[k]);
  next_ = 0;
  in_backward_ = true;
}

void Reducer::hold() {
  in_backward_ = false;
}

void Reducer::release() {
  FREIGHT_CHECK(next_ == 0, "Reducer::release: buckets were started before the group's end");
  in_backward_ = true;
}

void Reducer::ready(size_t param) {
  if (!in_backward_) return;  // a backward outside a step (a test's own): not ours to sum
  Bucket& b = buckets_[bucket_of_[param]];
  FREIGHT_CHECK(params_[param].grad().same(views_[param]),
                fmt::format("data-parallel training: the gradient of parameter {} was replaced "
                            "during backward, so it is not in its bucket",
                            param));
  if (b.pending > 0) --b.pending;
  if (overlap_) start_ready_in_order();
  if (!device_sums_) sums_.progress();  // OpenMPI moves a started sum only inside MPI calls
}

void Reducer::start(Bucket& b) {
  if (device_sums_)
    device_sums_->start(b.flat.data_ptr(), b.flat.numel(), b.flat.dtype());
  else
    sums_.start(b.flat.data_ptr(), b.flat.numel(), b.flat.dtype());
}

void Reducer::start_ready_in_order() {
  while (next_ < buckets_.size() && buckets_[next_].pending == 0) {
    start(buckets_[next_++]);
    ++early_;
  }
}

void Reducer::finish(int64_t step) {
  in_backward_ = false;
  while (next_ < buckets_.size()) start(buckets_[next_++]);
  const std::string what =
      fmt::format("the sum of the gradients over the ranks (step {}, {} bucket{})", step,
                  buckets_.size(), buckets_.size() == 1 ? "" : "s");
  if (device_sums_)
    device_sums_->finish(what);
  else
    sums_.finish(what);
}

}  // namespace freight::dist
