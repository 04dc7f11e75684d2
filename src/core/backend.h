// The device backends: memory, copies and synchronisation for one device type. The CPU backend
// is always registered; the CUDA one registers itself when the library is built with it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "freight/device.h"
#include "freight/dtype.h"
#include "freight/runtime.h"

namespace freight {

// A host-to-device copy queued by DeviceBackend::upload.
class PendingUpload {
 public:
  virtual ~PendingUpload() = default;  // waits (as wait()) when wait() was never called
  // Work queued on the device after this call runs after the copy (a device-side wait: the
  // host does not block).
  virtual void wait() = 0;
};

// Device work recorded once and replayed (a CUDA graph), see DeviceBackend::capture.
class DeviceGraph {
 public:
  virtual ~DeviceGraph() = default;
  virtual void replay() = 0;
};

// In-place sums of device buffers over the ranks of a data-parallel job (NCCL on a GPU), made
// by DeviceBackend::rank_sums. Nothing here blocks the host: the sums run on a stream of their
// own, ordered with the device's work by events.
class RankSums {
 public:
  virtual ~RankSums() = default;
  // Queues the sum of the `count` elements of `dtype` at `data` (device memory) over the ranks,
  // in place, after all the work queued on the device so far (the backward that wrote them).
  // Every rank must start the same sums in the same order.
  virtual void start(void* data, int64_t count, DType dtype) = 0;
  // Work queued on the device after this call runs after every sum started so far. The host
  // does not wait for them; it waits (up to `timeout_seconds`) for the sums of the finish()
  // before, so a rank that stopped answering shows within a step, named by `what` (that step's).
  virtual void finish(const std::string& what) = 0;
};
struct RankSumsSetup {
  int rank = 0, size = 1;
  double timeout_seconds = 600;
  // Sends rank 0's `bytes` at `data` to every rank (the communicator's id, over MPI).
  std::function<void(void* data, size_t bytes)> broadcast_from_rank0;
};

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  virtual const char* name() const = 0;
  virtual void* allocate(size_t bytes, int index) = 0;
  virtual void deallocate(void* ptr, size_t bytes, int index) = 0;
  // Copies bytes between two devices, at least one of which is this backend's.
  virtual void copy(void* dst, Device dst_device, const void* src, Device src_device,
                    size_t bytes) = 0;
  // Fills `bytes` at `dst` with the byte `value` (used for zeroing and NaN poisoning).
  virtual void memset(void* dst, int value, size_t bytes, int index) = 0;
  // Number of usable devices; on failure 0 with the reason in `why`.
  virtual int device_count(std::string* why) = 0;
  virtual void synchronize(int index) = 0;
  // The stream this backend queues work on for device `index` (cudaStream_t on CUDA), for
  // exchanging memory with other libraries (DLPack); nullptr where there is none.
  virtual void* stream_handle(int index) { return nullptr; }
  virtual MemoryStats memory_stats(int index) = 0;
  virtual void reset_peak(int index) = 0;
  virtual void empty_cache(int index) = 0;
  // Deterministic mode (freight::set_deterministic): a backend that chooses among algorithms
  // keeps to reproducible ones while it is on. The default does nothing (the CPU kernels are
  // deterministic already).
  virtual void set_deterministic(bool on) {}
  // Description of device `index` (see DeviceInfo); the default names the backend only.
  virtual DeviceInfo info(int index) {
    DeviceInfo d;
    d.name = name();
    return d;
  }

  // ---- the GPU's extras; the defaults throw (a CPU-only backend has none of them) ----
  // Page-locked host memory for staging copies, allocated in device `index`'s context and
  // cached (runtime.h, empty_pinned).
  virtual void* allocate_pinned(size_t bytes, int index);
  virtual void deallocate_pinned(void* ptr, size_t bytes, int index);
  // Copies `bytes` of host memory at `src` to device memory at `dst` on device `index`'s copy
  // stream, ordered after every piece of work queued on the device so far (so a block that the
  // cache just recycled is no longer read by earlier work) and overlapping work queued later.
  // The caller must call wait() on the result before queueing work that reads `dst`. A pinned
  // source stays reserved until the copy has run even if its tensor is freed first; a pageable
  // source may be reused as soon as this returns.
  virtual std::unique_ptr<PendingUpload> upload(void* dst, const void* src, size_t bytes,
                                                int index);
  // Records the device work that `work` queues on device `index` (from this thread) into a
  // graph, without running it. Memory allocated meanwhile comes from a pool private to the
  // graph and stays reserved for it while it lives. `work` runs on the host once, so its host
  // effects (counters, random offsets reserved from the default generator) belong to one
  // execution: the first replay() runs the recorded work as the device half of that same
  // execution. Each later replay() runs the device work alone; the backend advances the default
  // generator as `work` did and makes the replay draw the numbers that an execution at the
  // generator's current offset would, the caller redoes any other host bookkeeping. Any host
  // synchronisation inside `work` makes the capture fail with an error.
  virtual std::unique_ptr<DeviceGraph> capture(int index, const std::function<void()>& work);
  // Sums over the ranks of a job for buffers on device `index` (one device per rank). A
  // collective: every rank calls it, in the same order as its other collectives.
  virtual std::unique_ptr<RankSums> rank_sums(int index, const RankSumsSetup& setup);
};

void register_backend(DeviceType type, DeviceBackend* backend);
// Throws a clear error when the device type has no backend (e.g. a CPU-only build).
DeviceBackend& backend_for(DeviceType type);
// Whether the device type has a backend; for CUDA the first call loads it (libfreight_cuda.so).
bool has_backend(DeviceType type);
// Whether the backend is there already, without loading it.
bool backend_loaded(DeviceType type);
// Why has_backend(type) is false ("" when it is true).
std::string missing_backend_reason(DeviceType type);
// Why no GPU can be there without asking the CUDA backend, or "": the NVIDIA driver's library
// is missing. Loads nothing of CUDA's but the driver's library.
const std::string& cuda_driver_missing();

// Registers the CUDA backend and its kernels (defined by the CUDA library when it is built; the
// library also exports it as extern "C" freight_register_cuda_backend, which libfreight looks up
// when it loads the library).
void register_cuda_backend();

}  // namespace freight
