// The CUDA device backend: device discovery, a caching allocator, copies and synchronisation.
//
// Allocation: cudaMalloc/cudaFree synchronise the device and cost tens of microseconds, so
// blocks are cached per (device, rounded size) and reused; the steady state of a training loop
// never calls cudaMalloc. Work is stream-ordered on one stream per device, so a block freed by
// the host can be reused by later work on the same stream without waiting.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <mutex>
#include <unordered_map>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_context.h"
#include "core/backend.h"

namespace freight::cuda {

// ---------------------------------------------------------------- status helpers
std::string status_text(cudaError_t s) {
  return fmt::format("{} ({})", cudaGetErrorString(s), cudaGetErrorName(s));
}
std::string status_text(cublasStatus_t s) {
  return fmt::format("cuBLAS status {} ({})", int(s), cublasGetStatusString(s));
}
bool is_ok(cudaError_t s) { return s == cudaSuccess; }
bool is_ok(cublasStatus_t s) { return s == CUBLAS_STATUS_SUCCESS; }

void throw_status(const std::string& what, const char* call, const char* file, int line) {
  throw Error(fmt::format("CUDA error: {} in {} at {}:{}", what, call, file, line));
}

// ---------------------------------------------------------------- context
namespace {
constexpr int kMaxDevices = 64;

struct DeviceState {
  std::once_flag init;
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
};
DeviceState g_devices[kMaxDevices];

DeviceState& state(int device) {
  FREIGHT_CHECK(device >= 0 && device < kMaxDevices, fmt::format("bad CUDA device {}", device));
  DeviceState& s = g_devices[device];
  std::call_once(s.init, [&] {
    FREIGHT_CUDA_CHECK(cudaSetDevice(device));
    FREIGHT_CUDA_CHECK(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking));
    FREIGHT_CUDA_CHECK(cublasCreate(&s.cublas));
    FREIGHT_CUDA_CHECK(cublasSetStream(s.cublas, s.stream));
  });
  return s;
}
}  // namespace

void set_device(int device) {
  thread_local int current = -1;
  if (current == device) return;
  FREIGHT_CUDA_CHECK(cudaSetDevice(device));
  current = device;
}

cudaStream_t stream(int device) { return state(device).stream; }
cublasHandle_t cublas(int device) { return state(device).cublas; }

// ---------------------------------------------------------------- backend
namespace {

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
        (void)cudaGetLastError();
        size_t free_b = 0, total_b = 0;
        cudaMemGetInfo(&free_b, &total_b);
        throw Error(fmt::format(
            "CUDA out of memory on cuda:{}: asked for {:.1f} MiB, {:.1f} MiB free of {:.1f} "
            "MiB ({:.1f} MiB held by live tensors); try a smaller --batch-size",
            index, double(size) / (1 << 20), double(free_b) / (1 << 20),
            double(total_b) / (1 << 20), double(d.stats.in_use) / (1 << 20)));
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
    if (dd.is_cpu() || sd.is_cpu()) FREIGHT_CUDA_CHECK(cudaStreamSynchronize(s));
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
    cudaStreamSynchronize(stream(index));  // blocks may still be in use by queued work
    for (auto& [size, blocks] : d.free)
      for (void* p : blocks) cudaFree(p);
    d.free.clear();
    d.stats.cached = 0;
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
