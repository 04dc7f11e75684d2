#include "freight/runtime.h"

#include <atomic>

#include "core/backend.h"

namespace freight {

namespace {
std::atomic<bool> g_poison{false};
}

void set_poison_allocations(bool on) { g_poison = on; }
bool poison_allocations() { return g_poison; }

MemoryStats memory_stats(Device d) { return backend_for(d.type).memory_stats(d.index); }
void reset_peak_memory(Device d) { backend_for(d.type).reset_peak(d.index); }
void empty_cache(Device d) { backend_for(d.type).empty_cache(d.index); }
void synchronize(Device d) { backend_for(d.type).synchronize(d.index); }

}  // namespace freight
