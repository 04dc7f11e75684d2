// The CUDA device backend: device discovery, a caching allocator, copies and synchronisation.
//
// Allocation: cudaMalloc/cudaFree synchronise the device and cost tens of microseconds, so
// blocks are cached per (device, rounded size) and reused; the steady state of a training loop
// never calls cudaMalloc. Work is stream-ordered on one stream per device, so a block freed by
// the host can be reused by later work on the same stream without waiting.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <atomic>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_context.h"
#include "backend/cuda/deferred_error.h"
#include "core/backend.h"

namespace freight::cuda {

// ---------------------------------------------------------------- status helpers
std::string status_text(cudaError_t s) {
  return fmt::format("{} ({})", cudaGetErrorString(s), cudaGetErrorName(s));
}
std::string status_text(cublasStatus_t s) {
  return fmt::format("cuBLAS status {} ({})", int(s), cublasGetStatusString(s));
}
std::string status_text(cudnnStatus_t s) {
  // cuDNN keeps a longer description of the most recent failure on this thread.
  char detail[512] = {};
  cudnnGetLastErrorString(detail, sizeof detail);
  return fmt::format("cuDNN status {} ({}){}", int(s), cudnnGetErrorString(s),
                     detail[0] ? fmt::format(": {}", detail) : std::string());
}
bool is_ok(cudaError_t s) {
  return s == cudaSuccess;
}
bool is_ok(cublasStatus_t s) {
  return s == CUBLAS_STATUS_SUCCESS;
}
bool is_ok(cudnnStatus_t s) {
  return s == CUDNN_STATUS_SUCCESS;
}

void throw_status(const std::string& what, const char* call, const char* file, int line) {
  throw Error(fmt::format("CUDA error: {} in {} at {}:{}", what, call, file, line));
}

// ---------------------------------------------------------------- context
namespace {
std::atomic<bool> g_deterministic{false};
}
void set_deterministic(bool on) {
  g_deterministic.store(on, std::memory_order_relaxed);
}
bool deterministic() {
  return g_deterministic.load(std::memory_order_relaxed);
}

void set_device(int device) {
  thread_local int current = -1;
  if (current == device) return;
  FREIGHT_CUDA_CHECK(cudaSetDevice(device));
  current = device;
}

namespace {
constexpr int kMaxDevices = 64;

struct DeviceState {
  std::once_flag init;
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  // The deferred-error record (deferred_error.h): host and device views of the mapped struct,
  // and the device flag that the first reporter claims.
  DeferredErrorInfo* deferred_host = nullptr;
  DeferredErrorInfo* deferred_device = nullptr;
  int* deferred_claimed = nullptr;
};
DeviceState g_devices[kMaxDevices];

DeviceState& state(int device) {
  FREIGHT_CHECK(device >= 0 && device < kMaxDevices, fmt::format("bad CUDA device {}", device));
  DeviceState& s = g_devices[device];
  std::call_once(s.init, [&] {
    set_device(device);  // (through set_device, so its per-thread cache stays right)
    FREIGHT_CUDA_CHECK(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking));
    FREIGHT_CUDA_CHECK(cublasCreate(&s.cublas));
    FREIGHT_CUDA_CHECK(cublasSetStream(s.cublas, s.stream));
    void* host = nullptr;
    FREIGHT_CUDA_CHECK(cudaHostAlloc(&host, sizeof(DeferredErrorInfo),
                                     cudaHostAllocMapped | cudaHostAllocPortable));
    s.deferred_host = static_cast<DeferredErrorInfo*>(host);
    *s.deferred_host = DeferredErrorInfo{};
    void* dev_view = nullptr;
    FREIGHT_CUDA_CHECK(cudaHostGetDevicePointer(&dev_view, host, 0));
    s.deferred_device = static_cast<DeferredErrorInfo*>(dev_view);
    FREIGHT_CUDA_CHECK(cudaMalloc(&s.deferred_claimed, sizeof(int)));
    // On our stream (a non-blocking stream does not wait for the legacy default stream), then
    // waited for, so the flag is cleared before any kernel can look at it.
    FREIGHT_CUDA_CHECK(cudaMemsetAsync(s.deferred_claimed, 0, sizeof(int), s.stream));
    FREIGHT_CUDA_CHECK(cudaStreamSynchronize(s.stream));
  });
  return s;
}

std::string deferred_message(const DeferredErrorInfo& e, int device) {
  std::string where = fmt::format(
      " [found by a kernel on cuda:{}; reported at the next synchronisation, so the failing op "
      "may be earlier than the call that threw]",
      device);
  switch (DeferredKind(e.kind)) {
    case DeferredKind::CrossEntropyLabel:
      return fmt::format(
          "cross_entropy: label {} at position {} is out of range for {} classes (expected 0 <= "
          "label < {}){}",
          e.value, e.position, e.limit, e.limit, where);
    case DeferredKind::EmbeddingIndex:
      return fmt::format(
          "embedding: index {} at position {} is out of range for a table of {} rows (expected "
          "0 <= index < {}){}",
          e.value, e.position, e.limit, e.limit, where);
    case DeferredKind::None:
      break;
  }
  return fmt::format("a CUDA kernel reported error kind {} (value {}, position {}, limit {}){}",
                     e.kind, e.value, e.position, e.limit, where);
}
}  // namespace

cudaStream_t stream(int device) {
  return state(device).stream;
}
cublasHandle_t cublas(int device) {
  return state(device).cublas;
}

DeferredErrorSlot deferred_error_slot(int device) {
  DeviceState& s = state(device);
  return {s.deferred_claimed, s.deferred_device};
}

void check_deferred_error(int device) {
  DeviceState& s = state(device);
  volatile DeferredErrorInfo* rec = s.deferred_host;
  if (rec->kind == int32_t(DeferredKind::None)) return;  // the common case: one load
  DeferredErrorInfo e;
  e.kind = rec->kind;
  e.unused = 0;
  e.value = rec->value;
  e.position = rec->position;
  e.limit = rec->limit;
  rec->kind = int32_t(DeferredKind::None);
  rec->value = 0;
  rec->position = 0;
  rec->limit = 0;
  // Re-arm the device flag behind everything already queued (the stream is idle here anyway).
  set_device(device);
  FREIGHT_CUDA_CHECK(cudaMemsetAsync(s.deferred_claimed, 0, sizeof(int), s.stream));
  throw Error(deferred_message(e, device));
}

// ---------------------------------------------------------------- backend
namespace {

std::string bytes_text(size_t bytes) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = double(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 6) v /= 1024.0, ++u;
  return u == 0 ? fmt::format("{} bytes", bytes) : fmt::format("{:.2f} {}", v, units[u]);
}

size_t round_size(size_t bytes) {
  // 512-byte granularity below 1 MiB, 2 MiB above (fewer distinct sizes for big activations).
  size_t unit = bytes < (size_t(1) << 20) ? 512 : (size_t(2) << 20);
  return (bytes + unit - 1) / unit * unit;
}

class CudaBackend final : public DeviceBackend {
 public:
  const char* name() const override { return "cuda"; }

  void* allocate(size_t bytes, int index) override {
    size_t size = round_size(bytes);
    std::lock_guard<std::mutex> lock(mu_);
    PerDevice& d = dev(index);
    d.stats.allocs++;
    void* p = nullptr;
    auto it = d.free.find(size);
    if (it != d.free.end() && !it->second.empty()) {
      p = it->second.back();
      it->second.pop_back();
      d.stats.cached -= size;
    } else {
      set_device(index);
      cudaError_t err = cudaMalloc(&p, size);
      if (err == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        release_locked(index);  // give cached blocks back and try once more
        err = cudaMalloc(&p, size);
      }
      if (err == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();  // clear the (non-sticky) allocation error
        size_t free_b = 0, total_b = 0;
        std::string avail;
        if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) {
          avail = fmt::format("{} free of {}", bytes_text(free_b), bytes_text(total_b));
        } else {
          (void)cudaGetLastError();
          avail = "free memory unknown (cudaMemGetInfo failed)";
        }
        throw Error(fmt::format(
            "CUDA out of memory on cuda:{}: asked for {} ({} bytes), {} ({} held by live "
            "tensors, cache already released); try a smaller --batch-size",
            index, bytes_text(bytes), bytes, avail, bytes_text(d.stats.in_use)));
      }
      FREIGHT_CUDA_CHECK(err);
      d.stats.fresh++;
    }
    d.stats.in_use += size;
    d.stats.peak = std::max(d.stats.peak, d.stats.in_use);
    return p;
  }

  void deallocate(void* p, size_t bytes, int index) override {
    size_t size = round_size(bytes);
    std::lock_guard<std::mutex> lock(mu_);
    PerDevice& d = dev(index);
    d.stats.in_use -= size;
    d.free[size].push_back(p);
    d.stats.cached += size;
  }

  void copy(void* dst, Device dd, const void* src, Device sd, size_t bytes) override {
    // Stream-ordered on the GPU side's stream; the host waits when it reads the result (or when
    // its pageable source buffer could be reused before the copy ran).
    Device gpu = dd.is_cuda() ? dd : sd;
    set_device(gpu.index);
    cudaStream_t s = stream(gpu.index);
    FREIGHT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s));
    if (dd.is_cpu() || sd.is_cpu()) {
      FREIGHT_CUDA_CHECK(cudaStreamSynchronize(s));
      // The stream is idle: a label or index error recorded by an earlier kernel surfaces here
      // (this is where loss.item() and to(cpu) of a result find it).
      check_deferred_error(gpu.index);
    }
  }

  void memset(void* dst, int value, size_t bytes, int index) override {
    set_device(index);
    FREIGHT_CUDA_CHECK(cudaMemsetAsync(dst, value, bytes, stream(index)));
  }

  int device_count(std::string* why) override {
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      // Without a driver this is an error (cudaErrorNoDevice / InsufficientDriver), not zero.
      if (why) *why = fmt::format("cudaGetDeviceCount failed: {}", status_text(err));
      return 0;
    }
    if (n == 0 && why) *why = "no CUDA device visible (check CUDA_VISIBLE_DEVICES)";
    return n;
  }

  void synchronize(int index) override {
    set_device(index);
    FREIGHT_CUDA_CHECK(cudaStreamSynchronize(stream(index)));
    check_deferred_error(index);
  }

  MemoryStats memory_stats(int index) override {
    std::lock_guard<std::mutex> lock(mu_);
    return dev(index).stats;
  }
  void reset_peak(int index) override {
    std::lock_guard<std::mutex> lock(mu_);
    dev(index).stats.peak = dev(index).stats.in_use;
  }
  void empty_cache(int index) override {
    std::lock_guard<std::mutex> lock(mu_);
    release_locked(index);
  }
  void set_deterministic(bool on) override { cuda::set_deterministic(on); }

 private:
  struct PerDevice {
    std::unordered_map<size_t, std::vector<void*>> free;
    MemoryStats stats;
  };
  PerDevice& dev(int index) {
    if (int(devices_.size()) <= index) devices_.resize(index + 1);
    return devices_[index];
  }
  void release_locked(int index) {
    PerDevice& d = dev(index);
    set_device(index);
    // Blocks may still be in use by queued work. A deferred error is left for the next
    // synchronize or copy to report (this runs inside allocate and empty_cache).
    FREIGHT_CUDA_CHECK(cudaStreamSynchronize(stream(index)));
    for (auto& [size, blocks] : d.free) {
      while (!blocks.empty()) {
        FREIGHT_CUDA_CHECK(cudaFree(blocks.back()));
        d.stats.cached -= size;
        blocks.pop_back();
      }
    }
    d.free.clear();
  }

  std::mutex mu_;
  std::vector<PerDevice> devices_;
};

}  // namespace
}  // namespace freight::cuda

namespace freight {
void register_cuda_backend() {
  static cuda::CudaBackend* backend = new cuda::CudaBackend();  // lives as long as the process
  register_backend(DeviceType::CUDA, backend);
}
}  // namespace freight
