#include "freight/runtime.h"

#include <atomic>

#include "core/backend.h"

namespace freight {

namespace {
std::atomic<bool> g_poison{false};
std::atomic<bool> g_deterministic{false};
}  // namespace

void set_poison_allocations(bool on) { g_poison = on; }
bool poison_allocations() { return g_poison; }

void set_deterministic(bool on) {
  g_deterministic = on;
  for (DeviceType t : {DeviceType::CPU, DeviceType::CUDA})
    if (has_backend(t)) backend_for(t).set_deterministic(on);
}
bool deterministic() { return g_deterministic; }

MemoryStats memory_stats(Device d) { return backend_for(d.type).memory_stats(d.index); }
void reset_peak_memory(Device d) { backend_for(d.type).reset_peak(d.index); }
void empty_cache(Device d) { backend_for(d.type).empty_cache(d.index); }
void synchronize(Device d) { backend_for(d.type).synchronize(d.index); }

}  // namespace freight
