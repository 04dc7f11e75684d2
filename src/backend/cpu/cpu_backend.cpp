// The CPU device: a caching allocator (64-byte aligned blocks kept per size for reuse, because
// touching fresh pages costs about 10 µs per 4 KiB: a training step that allocated anew every
// time would spend much of its time in page faults) and plain memcpy/memset.
#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/backend.h"
#include "freight/error.h"

namespace freight::cpu {
namespace {

constexpr size_t kAlign = 64;
// Cached bytes above which the cache is dropped before growing further.
constexpr size_t kMaxCached = size_t(4) << 30;

size_t round_size(size_t bytes) {
  size_t unit = bytes < (size_t(1) << 20) ? kAlign : 4096;
  return (bytes + unit - 1) / unit * unit;
}

class CpuBackend final : public DeviceBackend {
 public:
  const char* name() const override { return "cpu"; }

  void* allocate(size_t bytes, int) override {
    size_t size = round_size(bytes);
    std::lock_guard<std::mutex> lock(mu_);
    stats_.allocs++;
    void* p = nullptr;
    auto it = free_.find(size);
    if (it != free_.end() && !it->second.empty()) {
      p = it->second.back();
      it->second.pop_back();
      stats_.cached -= size;
    } else {
      if (stats_.cached + size > kMaxCached) release_all_locked();
      p = std::aligned_alloc(kAlign, size);
      if (!p) {
        release_all_locked();
        p = std::aligned_alloc(kAlign, size);
      }
      FREIGHT_CHECK(p != nullptr,
                    fmt::format("out of host memory: could not allocate {:.1f} MiB ({} bytes "
                                "in use by tensors); try a smaller --batch-size",
                                double(size) / (1 << 20), stats_.in_use));
      stats_.fresh++;
    }
    stats_.in_use += size;
    stats_.peak = std::max(stats_.peak, stats_.in_use);
    return p;
  }

  void deallocate(void* p, size_t bytes, int) override {
    size_t size = round_size(bytes);
    std::lock_guard<std::mutex> lock(mu_);
    stats_.in_use -= size;
    free_[size].push_back(p);
    stats_.cached += size;
  }

  void copy(void* dst, Device, const void* src, Device, size_t bytes) override {
    std::memcpy(dst, src, bytes);
  }
  void memset(void* dst, int value, size_t bytes, int) override { std::memset(dst, value, bytes); }
  int device_count(std::string*) override { return 1; }
  void synchronize(int) override {}

  MemoryStats memory_stats(int) override {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }
  void reset_peak(int) override {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.peak = stats_.in_use;
  }
  void empty_cache(int) override {
    std::lock_guard<std::mutex> lock(mu_);
    release_all_locked();
  }

 private:
  void release_all_locked() {
    for (auto& [size, blocks] : free_)
      for (void* p : blocks) std::free(p);
    free_.clear();
    stats_.cached = 0;
  }

  std::mutex mu_;
  std::unordered_map<size_t, std::vector<void*>> free_;
  MemoryStats stats_;
};

CpuBackend& instance() {
  static CpuBackend* b = new CpuBackend();  // never destroyed: tensors may outlive statics
  return *b;
}

struct Registration {
  Registration() { register_backend(DeviceType::CPU, &instance()); }
} registration;

}  // namespace
}  // namespace freight::cpu
