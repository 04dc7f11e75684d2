// The device backends: memory, copies and synchronisation for one device type. The CPU backend
// is always registered; the CUDA one registers itself when the library is built with it.
#pragma once
#include <cstddef>
#include <string>

#include "freight/device.h"
#include "freight/runtime.h"

namespace freight {

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
};

void register_backend(DeviceType type, DeviceBackend* backend);
// Throws a clear error when the device type has no backend (e.g. a CPU-only build).
DeviceBackend& backend_for(DeviceType type);
bool has_backend(DeviceType type);

// Registers the CUDA backend and its kernels (defined by the CUDA library when it is built).
void register_cuda_backend();

}  // namespace freight
