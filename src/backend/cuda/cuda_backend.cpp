// The CUDA device backend: device discovery and description, the caching allocator (with the
// private pools of CUDA graphs), pinned host memory, copies, the copy stream that overlaps
// input uploads with compute, graph capture and replay, and synchronisation.
//
// Streams: all of Freight's work on a device is queued on its one compute stream, so a block
// freed by the host can be reused by later work without waiting (block_cache.h). Input batches
// are uploaded on a second stream (upload()): the copy first waits for an event recorded on the
// compute stream, which covers every earlier user of the destination block, and the compute
// stream then waits for the copy's own event before it reads the batch. Both waits happen on
// the device; the host never blocks.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <atomic>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "backend/cuda/block_cache.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_context.h"
#include "backend/cuda/deferred_error.h"
#include "backend/cuda/nccl_sums.h"
#include "core/backend.h"
#include "freight/random.h"

namespace freight::cuda {

// The CPU emulation (tests/cuda/emulation) poisons cached blocks and the slack past each
// tensor for AddressSanitizer; on a GPU these do nothing.
#ifdef FREIGHT_CUDA_EMULATION
inline void emulation_block_handed_out(void* p, size_t bytes, size_t size) {
  emu::block_handed_out(p, bytes, size);
}
inline void emulation_block_cached(void* p, size_t size) {
  emu::block_cached(p, size);
}
inline void emulation_block_released(void* p, size_t size) {
  emu::block_released(p, size);
}
#else
inline void emulation_block_handed_out(void*, size_t, size_t) {}
inline void emulation_block_cached(void*, size_t) {}
inline void emulation_block_released(void*, size_t) {}
#endif

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
// cuBLAS workspace per device: NVIDIA's recommendation for Hopper (32 MiB; 4 MiB suffices
// before it). With a workspace of its own cuBLAS never allocates, which graph capture needs.
constexpr size_t kCublasWorkspace = size_t(32) << 20;

struct DeviceState {
  std::once_flag init;
  cudaStream_t stream = nullptr;
  cudaStream_t copy = nullptr;
  cublasHandle_t cublas = nullptr;
  void* cublas_workspace = nullptr;
  // The deferred-error record (deferred_error.h): host and device views of the mapped struct,
  // and the device flag that the first reporter claims.
  DeferredErrorInfo* deferred_host = nullptr;
  DeferredErrorInfo* deferred_device = nullptr;
  int* deferred_claimed = nullptr;
  // The random-offset delta read by kernels captured into graphs (graph_rng_delta).
  uint64_t* rng_delta = nullptr;
  // Spare events (disable-timing) for ordering uploads, created on this device.
  std::mutex events_mu;
  std::vector<cudaEvent_t> spare_events;
};
DeviceState g_devices[kMaxDevices];

DeviceState& state(int device) {
  FREIGHT_CHECK(device >= 0 && device < kMaxDevices, fmt::format("bad CUDA device {}", device));
  DeviceState& s = g_devices[device];
  std::call_once(s.init, [&] {
    set_device(device);  // (through set_device, so its per-thread cache stays right)
    FREIGHT_CUDA_CHECK(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking));
    FREIGHT_CUDA_CHECK(cudaStreamCreateWithFlags(&s.copy, cudaStreamNonBlocking));
    FREIGHT_CUDA_CHECK(cublasCreate(&s.cublas));
    // The stream first: cublasSetStream resets the workspace, so nothing may call it after
    // the workspace is bound (blas.cu never does).
    FREIGHT_CUDA_CHECK(cublasSetStream(s.cublas, s.stream));
    FREIGHT_CUDA_CHECK(cudaMalloc(&s.cublas_workspace, kCublasWorkspace));
    FREIGHT_CUDA_CHECK(cublasSetWorkspace(s.cublas, s.cublas_workspace, kCublasWorkspace));
    void* host = nullptr;
    FREIGHT_CUDA_CHECK(cudaHostAlloc(&host, sizeof(DeferredErrorInfo),
                                     cudaHostAllocMapped | cudaHostAllocPortable));
    s.deferred_host = static_cast<DeferredErrorInfo*>(host);
    *s.deferred_host = DeferredErrorInfo{};
    void* dev_view = nullptr;
    FREIGHT_CUDA_CHECK(cudaHostGetDevicePointer(&dev_view, host, 0));
    s.deferred_device = static_cast<DeferredErrorInfo*>(dev_view);
    FREIGHT_CUDA_CHECK(cudaMalloc(&s.deferred_claimed, sizeof(int)));
    FREIGHT_CUDA_CHECK(cudaMalloc(&s.rng_delta, sizeof(uint64_t)));
    // On our stream (a non-blocking stream does not wait for the legacy default stream), then
    // waited for, so the flag is cleared before any kernel can look at it.
    FREIGHT_CUDA_CHECK(cudaMemsetAsync(s.deferred_claimed, 0, sizeof(int), s.stream));
    FREIGHT_CUDA_CHECK(cudaMemsetAsync(s.rng_delta, 0, sizeof(uint64_t), s.stream));
    FREIGHT_CUDA_CHECK(cudaStreamSynchronize(s.stream));
  });
  return s;
}

cudaEvent_t take_event(int device) {
  DeviceState& s = state(device);
  {
    std::lock_guard<std::mutex> lock(s.events_mu);
    if (!s.spare_events.empty()) {
      cudaEvent_t e = s.spare_events.back();
      s.spare_events.pop_back();
      return e;
    }
  }
  set_device(device);
  cudaEvent_t e = nullptr;
  FREIGHT_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return e;
}

// Waits already queued on an event keep the state it had when they were queued, so an event
// can be recorded again as soon as nothing will be queued on its old record.
void recycle_event(int device, cudaEvent_t e) {
  DeviceState& s = state(device);
  std::lock_guard<std::mutex> lock(s.events_mu);
  s.spare_events.push_back(e);
}

bool capturing(int device) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  FREIGHT_CUDA_CHECK(cudaStreamIsCapturing(state(device).stream, &st));
  return st != cudaStreamCaptureStatusNone;
}

// A host wait or a host copy while the stream is captured would break the capture with a
// cryptic status; this says what happened instead.
void check_not_capturing(int device, const char* what) {
  FREIGHT_CHECK(!capturing(device),
                fmt::format("{} on cuda:{} while a CUDA graph of the training step is being "
                            "captured: the step must not wait for the GPU or move data to or "
                            "from the host (item(), to(cpu), from_vector, ...); run with "
                            "--no-cuda-graph to train without graphs",
                            what, device));
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

std::string bytes_text(size_t bytes) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = double(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 6) v /= 1024.0, ++u;
  return u == 0 ? fmt::format("{} bytes", bytes) : fmt::format("{:.2f} {}", v, units[u]);
}

std::string version_text(int v) {
  return fmt::format("{}.{}", v / 1000, (v % 1000) / 10);
}
}  // namespace

cudaStream_t stream(int device) {
  return state(device).stream;
}
cudaStream_t copy_stream(int device) {
  return state(device).copy;
}
cublasHandle_t cublas(int device) {
  return state(device).cublas;
}

const uint64_t* graph_rng_delta(int device) {
  DeviceState& s = state(device);
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  FREIGHT_CUDA_CHECK(cudaStreamIsCapturing(s.stream, &st));
  return st == cudaStreamCaptureStatusActive ? s.rng_delta : nullptr;
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

class CudaBackend;

// An upload queued on the copy stream; the compute stream waits for its event.
class CudaUpload final : public PendingUpload {
 public:
  CudaUpload(int device, cudaEvent_t done) : device_(device), done_(done) {}
  ~CudaUpload() override {
    try {
      // Never left unordered: the destination may be freed and recycled for compute work.
      if (!waited_) {
        set_device(device_);
        (void)cudaStreamWaitEvent(stream(device_), done_, 0);
      }
      recycle_event(device_, done_);
    } catch (...) {  // a destructor must not throw; the event is lost
    }
  }
  void wait() override {
    if (waited_) return;
    set_device(device_);
    FREIGHT_CUDA_CHECK(cudaStreamWaitEvent(stream(device_), done_, 0));
    waited_ = true;
  }

 private:
  int device_;
  cudaEvent_t done_;
  bool waited_ = false;
};

// A graph's constants (allocate_graph_constant): blocks of its pool that only it reads.
struct GraphConstant {
  void* p;
  size_t size;
};

class CudaGraph final : public DeviceGraph {
 public:
  CudaGraph(CudaBackend* backend, int device, cudaGraphExec_t exec, BlockCache::PoolId pool,
            std::vector<GraphConstant> constants, uint64_t rng_start, uint64_t rng_used)
      : backend_(backend),
        device_(device),
        exec_(exec),
        pool_(pool),
        constants_(std::move(constants)),
        rng_start_(rng_start),
        rng_used_(rng_used) {}
  ~CudaGraph() override;
  void replay() override {
    set_device(device_);
    cudaStream_t s = stream(device_);
    Generator& gen = default_generator();
    // The first replay is the device half of the captured execution, whose offsets the
    // capture already reserved; later ones draw where the generator is now, and move it on.
    bool advance = !first_ && rng_used_ > 0;
    write_u64_async(state(device_).rng_delta, advance ? gen.offset() - rng_start_ : 0, s);
    FREIGHT_CUDA_CHECK(cudaGraphLaunch(exec_, s));
    if (advance) gen.reserve(rng_used_);
    first_ = false;
  }

 private:
  CudaBackend* backend_;
  int device_;
  cudaGraphExec_t exec_;
  BlockCache::PoolId pool_;
  std::vector<GraphConstant> constants_;
  uint64_t rng_start_, rng_used_;
  bool first_ = true;
};

class CudaBackend final : public DeviceBackend {
 public:
  const char* name() const override { return "cuda"; }

  void* allocate(size_t bytes, int index) override {
    size_t size = round_block_size(bytes);
    std::lock_guard<std::mutex> lock(mu_);
    PerDevice& d = dev(index);
    bool in_capture = d.capture && d.capture->thread == std::this_thread::get_id();
    BlockCache::PoolId pool = in_capture ? d.capture->pool : BlockCache::kShared;
    auto system_alloc = [&](size_t n) { return system_malloc(index, n, in_capture); };
    bool fresh = false;
    void* p = d.cache.take(size, pool, system_alloc, &fresh);
    if (!p && !in_capture) {  // give cached blocks back and try once more (cudaFree cannot run
      release_locked(index);  // during a capture, which released the cache when it began)
      p = d.cache.take(size, pool, system_alloc, &fresh);
    }
    if (!p) throw out_of_memory(index, bytes, d, in_capture);
    // A graph's block serves every tensor the capture gave it, of whatever size, at each
    // replay: its slack is poisoned only for eager use.
    emulation_block_handed_out(p, in_capture ? size : bytes, size);
    return p;
  }

  // allocate_graph_constant (cuda_context.h): a fresh block of the capture's pool that no
  // other allocation of the capture can get, given back when the graph goes.
  void* allocate_constant(size_t bytes, int index) {
    size_t size = round_block_size(bytes);
    std::lock_guard<std::mutex> lock(mu_);
    PerDevice& d = dev(index);
    FREIGHT_CHECK(d.capture && d.capture->thread == std::this_thread::get_id(),
                  fmt::format("cuda:{}: a graph constant outside a capture", index));
    void* p = d.cache.take_fresh(size, d.capture->pool,
                                 [&](size_t n) { return system_malloc(index, n, true); });
    if (!p) throw out_of_memory(index, bytes, d, true);
    d.capture->constants.push_back(GraphConstant{p, size});
    emulation_block_handed_out(p, bytes, size);
    return p;
  }

  void deallocate(void* p, size_t bytes, int index) override {
    std::lock_guard<std::mutex> lock(mu_);
    PerDevice& d = dev(index);
    size_t size = round_block_size(bytes);
    // A graph's block stays in use by its replays: only blocks going to the shared cache are
    // really free.
    if (!d.cache.owned_by_a_pool(p)) emulation_block_cached(p, size);
    d.cache.give_back(p, size);
  }

  void copy(void* dst, Device dd, const void* src, Device sd, size_t bytes) override {
    // Stream-ordered on the GPU side's stream; the host waits when it reads the result (or when
    // its pageable source buffer could be reused before the copy ran).
    Device gpu = dd.is_cuda() ? dd : sd;
    bool host_side = dd.is_cpu() || sd.is_cpu();
    if (!host_side && dd.index != sd.index) {
      copy_between_gpus(dst, dd.index, src, sd.index, bytes);
      return;
    }
    set_device(gpu.index);
    cudaStream_t s = stream(gpu.index);
    if (host_side) check_not_capturing(gpu.index, "a host-device copy");
    FREIGHT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s));
    if (host_side) {
      FREIGHT_CUDA_CHECK(cudaStreamSynchronize(s));
      // The stream is idle: a label or index error recorded by an earlier kernel surfaces here
      // (this is where loss.item() and to(cpu) of a result find it).
      check_deferred_error(gpu.index);
    }
  }

  // A copy from one GPU to another, queued on the destination's stream behind the work of the
  // source's stream that produced the source (an event recorded there), and with the source's
  // stream made to wait for the copy before anything queued later on it (a kernel writing a
  // block that the source's tensor frees and the cache hands on) can touch the source.
  void copy_between_gpus(void* dst, int dst_dev, const void* src, int src_dev, size_t bytes) {
    check_not_capturing(src_dev, "a copy between GPUs");
    check_not_capturing(dst_dev, "a copy between GPUs");
    set_device(src_dev);
    cudaEvent_t produced = take_event(src_dev);
    FREIGHT_CUDA_CHECK(cudaEventRecord(produced, stream(src_dev)));
    set_device(dst_dev);
    FREIGHT_CUDA_CHECK(cudaStreamWaitEvent(stream(dst_dev), produced, 0));
    recycle_event(src_dev, produced);
    FREIGHT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream(dst_dev)));
    cudaEvent_t copied = take_event(dst_dev);
    FREIGHT_CUDA_CHECK(cudaEventRecord(copied, stream(dst_dev)));
    set_device(src_dev);
    FREIGHT_CUDA_CHECK(cudaStreamWaitEvent(stream(src_dev), copied, 0));
    recycle_event(dst_dev, copied);
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
    check_not_capturing(index, "synchronize()");
    FREIGHT_CUDA_CHECK(cudaStreamSynchronize(stream(index)));
    check_deferred_error(index);
  }

  void* stream_handle(int index) override {
    set_device(index);
    return static_cast<void*>(stream(index));
  }

  MemoryStats memory_stats(int index) override {
    std::lock_guard<std::mutex> lock(mu_);
    return dev(index).cache.stats();
  }
  void reset_peak(int index) override {
    std::lock_guard<std::mutex> lock(mu_);
    dev(index).cache.reset_peak();
  }
  void empty_cache(int index) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      release_locked(index);
    }
    std::lock_guard<std::mutex> lock(pinned_mu_);
    release_pinned_locked();
  }

  DeviceInfo info(int index) override {
    cudaDeviceProp p{};
    FREIGHT_CUDA_CHECK(cudaGetDeviceProperties(&p, index));
    DeviceInfo d;
    d.name = p.name;
    d.memory_total = p.totalGlobalMem;
    d.compute_units = p.multiProcessorCount;
    d.compute_capability = fmt::format("{}.{}", p.major, p.minor);
    set_device(index);
    size_t free_b = 0, total_b = 0;
    FREIGHT_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    d.memory_free = free_b;
    d.memory_total = total_b;
    int driver = 0, runtime = 0;
    FREIGHT_CUDA_CHECK(cudaDriverGetVersion(&driver));
    FREIGHT_CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
    d.driver_version = version_text(driver);
    d.runtime_version = version_text(runtime);
    int clock_khz = 0, mem_clock_khz = 0;
    FREIGHT_CUDA_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, index));
    FREIGHT_CUDA_CHECK(cudaDeviceGetAttribute(&mem_clock_khz, cudaDevAttrMemoryClockRate, index));
    d.details = fmt::format(
        "{} MHz, memory {} MHz on a {}-bit bus, L2 {}, ECC {}, PCI {:04x}:{:02x}:{:02x}",
        clock_khz / 1000, mem_clock_khz / 1000, p.memoryBusWidth, bytes_text(size_t(p.l2CacheSize)),
        p.ECCEnabled ? "on" : "off", p.pciDomainID, p.pciBusID, p.pciDeviceID);
    return d;
  }

  // ---- pinned host memory ----
  void* allocate_pinned(size_t bytes, int index) override {
    size_t size = round_block_size(bytes);
    std::lock_guard<std::mutex> lock(pinned_mu_);
    if (void* p = pinned_.take(size, event_done)) {
      emulation_block_handed_out(p, bytes, size);
      return p;
    }
    set_device(index);  // the context that allocates it: never device 0 by accident
    void* p = nullptr;
    cudaError_t err = cudaHostAlloc(&p, size, cudaHostAllocPortable);
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      release_pinned_locked();
      err = cudaHostAlloc(&p, size, cudaHostAllocPortable);
    }
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      throw OutOfMemoryError(
          fmt::format("out of pinned host memory: cudaHostAlloc of {} ({} "
                      "bytes) failed with {} cached; try a smaller "
                      "--batch-size",
                      bytes_text(size), size, bytes_text(pinned_.cached_bytes())),
          size, 0, 0);
    }
    FREIGHT_CUDA_CHECK(err);
    cudaEvent_t ev = nullptr;
    cudaError_t ev_err = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    if (ev_err != cudaSuccess) {
      (void)cudaFreeHost(p);
      FREIGHT_CUDA_CHECK(ev_err);
    }
    pinned_.add_fresh(p, size, ev, index);
    emulation_block_handed_out(p, bytes, size);
    return p;
  }

  void deallocate_pinned(void* p, size_t bytes, int) override {
    std::lock_guard<std::mutex> lock(pinned_mu_);
    // (The emulation poisons it once the copies queued before now have run.)
    emulation_block_cached(p, round_block_size(bytes));
    pinned_.give_back(p);
  }

  // ---- uploads ----
  std::unique_ptr<PendingUpload> upload(void* dst, const void* src, size_t bytes,
                                        int index) override {
    set_device(index);
    DeviceState& s = state(index);
    check_not_capturing(index, "an upload");
    // Behind everything queued on the compute stream so far: every earlier user of `dst`.
    cudaEvent_t order = take_event(index);
    FREIGHT_CUDA_CHECK(cudaEventRecord(order, s.stream));
    FREIGHT_CUDA_CHECK(cudaStreamWaitEvent(s.copy, order, 0));
    recycle_event(index, order);
    FREIGHT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s.copy));
    {
      std::lock_guard<std::mutex> lock(pinned_mu_);
      PinnedCache::Use use = pinned_.mark_use(src);
      if (use.event && use.device == index) {
        FREIGHT_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(use.event), s.copy));
      } else if (use.event) {
        // Pinned for another GPU: its event cannot be recorded here, so wait for the copy.
        FREIGHT_CUDA_CHECK(cudaStreamSynchronize(s.copy));
      }
    }
    cudaEvent_t done = take_event(index);
    FREIGHT_CUDA_CHECK(cudaEventRecord(done, s.copy));
    return std::make_unique<CudaUpload>(index, done);
  }

  // ---- graphs ----
  std::unique_ptr<DeviceGraph> capture(int index, const std::function<void()>& work) override {
    set_device(index);
    DeviceState& s = state(index);
    BlockCache::PoolId pool = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      PerDevice& d = dev(index);
      FREIGHT_CHECK(!d.capture,
                    fmt::format("cuda:{}: a CUDA graph is already being captured", index));
      // The graph's pool takes fresh blocks only, and no cudaFree may run during the capture
      // to make room: give the shared cache back now.
      release_locked(index);
      pool = d.cache.create_pool();
      d.capture = Capture{pool, std::this_thread::get_id()};
    }
    Generator& gen = default_generator();
    uint64_t rng_start = gen.offset();
    cudaError_t begin = cudaStreamBeginCapture(s.stream, cudaStreamCaptureModeThreadLocal);
    if (begin != cudaSuccess) {
      end_capture(index, /*retire=*/true);
      FREIGHT_CUDA_CHECK(begin);
    }
    // Ends the failed capture and frees what it took, leaving the device usable.
    auto abandon = [&] {
      cudaGraph_t broken = nullptr;
      (void)cudaStreamEndCapture(s.stream, &broken);
      if (broken) (void)cudaGraphDestroy(broken);
      (void)cudaGetLastError();
      end_capture(index, /*retire=*/true);
    };
    try {
      work();
    } catch (const OutOfMemoryError&) {
      abandon();
      throw;  // the trainer's advice on the batch size needs the type
    } catch (const Error& e) {
      abandon();
      // A library refusing a call under capture (cuDNN 9 may build an engine on first use, and
      // the legacy convolution calls are not documented as capturable) surfaces here with the
      // library's status only: say that it happened in the capture and what to do.
      std::string m = e.what();
      if (m.find("--no-cuda-graph") != std::string::npos) throw;
      throw Error(
          fmt::format("{} (while capturing a CUDA graph of the training step on cuda:{}; "
                      "run with --no-cuda-graph to train without graphs)",
                      m, index));
    } catch (...) {
      abandon();
      throw;
    }
    cudaGraph_t graph = nullptr;
    cudaError_t end = cudaStreamEndCapture(s.stream, &graph);
    if (end != cudaSuccess || !graph) {
      (void)cudaGetLastError();
      if (graph) (void)cudaGraphDestroy(graph);
      end_capture(index, /*retire=*/true);
      throw Error(
          fmt::format("capturing a CUDA graph on cuda:{} failed: {} (some work in the "
                      "step synchronised with the host or used another stream); run "
                      "with --no-cuda-graph to train without graphs",
                      index, status_text(end)));
    }
    cudaGraphExec_t exec = nullptr;
    cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
    (void)cudaGraphDestroy(graph);
    if (inst != cudaSuccess) {
      (void)cudaGetLastError();
      end_capture(index, /*retire=*/true);
      FREIGHT_CUDA_CHECK(inst);
    }
    std::vector<GraphConstant> constants = end_capture(index, /*retire=*/false);
    return std::make_unique<CudaGraph>(this, index, exec, pool, std::move(constants), rng_start,
                                       gen.offset() - rng_start);
  }

  // The graph is gone and the device has finished with it: its constants and then its whole
  // pool join the shared cache.
  void retire_pool(int index, BlockCache::PoolId pool,
                   const std::vector<GraphConstant>& constants) {
    std::lock_guard<std::mutex> lock(mu_);
    PerDevice& d = dev(index);
    for (const GraphConstant& c : constants) d.cache.give_back(c.p, c.size);
    d.cache.retire_pool(pool);
  }
  void set_deterministic(bool on) override { cuda::set_deterministic(on); }
  std::unique_ptr<RankSums> rank_sums(int index, const RankSumsSetup& setup) override {
    return make_nccl_sums(index, setup);
  }

 private:
  struct Capture {
    BlockCache::PoolId pool;
    std::thread::id thread;
    std::vector<GraphConstant> constants = {};
  };
  struct PerDevice {
    BlockCache cache;
    std::optional<Capture> capture;
  };
  PerDevice& dev(int index) {
    FREIGHT_CHECK(index >= 0 && index < kMaxDevices, fmt::format("bad CUDA device {}", index));
    if (int(devices_.size()) <= index) devices_.resize(index + 1);
    return devices_[index];
  }

  // cudaMalloc, or nullptr when the device is full. During a capture the call is made in
  // relaxed capture mode: allocating is fine as long as the graph's blocks are never freed
  // before it is destroyed, which the pool guarantees (and replays do not repeat it).
  static void* system_malloc(int index, size_t size, bool in_capture) {
    set_device(index);
    void* p = nullptr;
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    if (in_capture) FREIGHT_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    cudaError_t err = cudaMalloc(&p, size);
    if (in_capture) FREIGHT_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // clear the (non-sticky) allocation error
      return nullptr;
    }
    FREIGHT_CUDA_CHECK(err);
    return p;
  }

  OutOfMemoryError out_of_memory(int index, size_t bytes, PerDevice& d, bool in_capture) {
    size_t free_b = 0, total_b = 0;
    std::string avail;
    if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) {
      avail = fmt::format("{} free of {}", bytes_text(free_b), bytes_text(total_b));
    } else {
      (void)cudaGetLastError();
      avail = "free memory unknown (cudaMemGetInfo failed)";
      free_b = 0;
    }
    size_t in_use = d.cache.stats().in_use;
    return OutOfMemoryError(
        fmt::format("CUDA out of memory on cuda:{}: asked for {} ({} bytes), {} ({} held by live "
                    "tensors{}, cache already released); try a smaller --batch-size",
                    index, bytes_text(bytes), bytes, avail, bytes_text(in_use),
                    in_capture ? " and CUDA graphs" : ""),
        bytes, free_b, in_use);
  }

  // Ends the bookkeeping of a capture; returns its constants (given back already when the
  // capture failed and its pool is retired).
  std::vector<GraphConstant> end_capture(int index, bool retire) {
    std::lock_guard<std::mutex> lock(mu_);
    PerDevice& d = dev(index);
    if (!d.capture) return {};
    std::vector<GraphConstant> constants = std::move(d.capture->constants);
    if (retire) {
      for (const GraphConstant& c : constants) d.cache.give_back(c.p, c.size);
      d.cache.retire_pool(d.capture->pool);
      constants.clear();
    }
    d.capture.reset();
    return constants;
  }

  void release_locked(int index) {
    PerDevice& d = dev(index);
    set_device(index);
    // Blocks may still be in use by queued work. A deferred error is left for the next
    // synchronize or copy to report (this runs inside allocate and empty_cache).
    FREIGHT_CUDA_CHECK(cudaStreamSynchronize(stream(index)));
    d.cache.release_shared([](void* p, size_t size) {
      emulation_block_released(p, size);
      FREIGHT_CUDA_CHECK(cudaFree(p));
    });
  }

  static bool event_done(PinnedCache::Event e) {
    cudaError_t st = cudaEventQuery(static_cast<cudaEvent_t>(e));
    if (st == cudaErrorNotReady) {
      (void)cudaGetLastError();
      return false;
    }
    FREIGHT_CUDA_CHECK(st);
    return true;
  }

  void release_pinned_locked() {
    pinned_.release(event_done, [](void* p, size_t size, PinnedCache::Event e) {
      emulation_block_released(p, size);
      FREIGHT_CUDA_CHECK(cudaEventDestroy(static_cast<cudaEvent_t>(e)));
      FREIGHT_CUDA_CHECK(cudaFreeHost(p));
    });
  }

  std::mutex mu_;
  std::vector<PerDevice> devices_;
  std::mutex pinned_mu_;
  PinnedCache pinned_;
};

CudaGraph::~CudaGraph() {
  try {
    // The pool may be handed to others only once no replay is queued any more.
    set_device(device_);
    (void)cudaStreamSynchronize(stream(device_));
    (void)cudaGraphExecDestroy(exec_);
    (void)cudaGetLastError();
    backend_->retire_pool(device_, pool_, constants_);
  } catch (...) {  // a destructor must not throw; the pool stays reserved
  }
}

}  // namespace
}  // namespace freight::cuda

namespace freight::cuda {
namespace {
CudaBackend& the_backend() {
  static CudaBackend* backend = new CudaBackend();  // lives as long as the process
  return *backend;
}
}  // namespace
void* allocate_graph_constant(int device, size_t bytes) {
  return the_backend().allocate_constant(bytes, device);
}
}  // namespace freight::cuda

namespace freight {
void register_cuda_backend() {
  register_backend(DeviceType::CUDA, &cuda::the_backend());
}
}  // namespace freight

// The entry point libfreight looks up (dlsym) when it loads this library (core/backend.cpp).
extern "C" __attribute__((visibility("default"))) void freight_register_cuda_backend() {
  freight::register_cuda_backend();
}
