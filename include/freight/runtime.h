// Process-wide runtime settings: CPU threads, memory statistics, debug poisoning.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "freight/device.h"

namespace freight {

// Threads used by CPU kernels and by the BLAS (one shared OpenMP pool, so they never compete).
void set_num_threads(int n);
int num_threads();

struct MemoryStats {
  size_t in_use = 0;    // bytes held by live tensors
  size_t peak = 0;      // high-water mark of in_use since the last reset
  size_t cached = 0;    // bytes kept by the caching allocator for reuse
  size_t allocs = 0;    // allocations served
  size_t fresh = 0;     // allocations that had to ask the system (cache misses)
};
MemoryStats memory_stats(Device device);
void reset_peak_memory(Device device);
void empty_cache(Device device);  // returns cached blocks to the system

// When on, every new allocation is filled with a NaN pattern before use, so an element a kernel
// forgot to write shows up as NaN in tests. Off by default (it costs a memset).
void set_poison_allocations(bool on);
bool poison_allocations();

// Deterministic mode, off by default: when on, every backend uses only algorithms whose results
// are reproducible bit for bit from run to run (on the GPU, deterministic cuDNN convolution
// algorithms, possibly slower). The CPU kernels are deterministic already. Applies to every
// device, to algorithms chosen after the call.
void set_deterministic(bool on);
bool deterministic();

// Blocks until all work queued on `device` has finished (a no-op on the CPU).
void synchronize(Device device);

// What a device is: for the CPU its model, cores and memory; for a GPU its name, memory, number
// of multiprocessors, compute capability and the driver and runtime versions.
struct DeviceInfo {
  Device device;
  std::string name;
  size_t memory_total = 0;  // bytes
  size_t memory_free = 0;   // bytes (GPU: free now; CPU: available now)
  int compute_units = 0;    // CPU: hardware threads; GPU: streaming multiprocessors
  std::string compute_capability;  // GPU: "9.0"
  std::string driver_version;      // GPU: "13.0"
  std::string runtime_version;     // GPU: CUDA runtime
  std::string details;             // CPU: BLAS and its kernels; GPU: clock, bus width, ...
};
// The CPU first, then every visible GPU (none when the CUDA backend is absent or unusable).
std::vector<DeviceInfo> list_devices();

// Versions of the libraries in use (BLAS, its core type, CUDA runtime...), for benchmark records.
std::string build_info();

}  // namespace freight
