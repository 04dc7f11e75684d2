// The thread's current layer tag and profiling hooks (see freight/profiler.h).
#include "freight/profiler.h"

namespace freight {

namespace {
thread_local const void* g_layer = nullptr;
thread_local ProfileHooks* g_hooks = nullptr;
}  // namespace

void set_profile_hooks(ProfileHooks* hooks) {
  g_hooks = hooks;
}
ProfileHooks* profile_hooks() {
  return g_hooks;
}
const void* current_layer() {
  return g_layer;
}

LayerScope::LayerScope(const void* layer) : layer_(layer), previous_(g_layer) {
  g_layer = layer;
  if (g_hooks) [[unlikely]]
    g_hooks->layer_enter(layer);
}

LayerScope::~LayerScope() {
  if (g_hooks) [[unlikely]]
    g_hooks->layer_exit(layer_);
  g_layer = previous_;
}

}  // namespace freight
