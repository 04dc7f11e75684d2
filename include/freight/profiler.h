// Layer tags and profiling hooks: the instrumentation behind `freight explain`.
//
// Every nn::Module call (Module::operator()) opens a LayerScope naming the module; ops recorded
// on the autograd graph while it is open remember that layer, so the backward pass knows which
// layer each of its nodes belongs to. Tags are opaque pointers (the nn::Module*), innermost
// scope wins (a Residual's own addition is tagged with the Residual, its convolutions with the
// Conv2d layers).
//
// A profiler installs ProfileHooks on the thread that trains; the forward scopes and the backward
// engine then report when each layer and each graph node starts and ends. With no hooks
// installed (the default) the cost is one predictable branch per layer call and per node, and
// results are bit-identical either way: hooks only observe (a GPU profiler synchronises the device
// inside them, which changes timing, never values).
#pragma once

namespace freight {

// Hooks must not throw (they run inside destructors); a profiler that synchronises a GPU keeps
// any error it meets and reports it after the step.
class ProfileHooks {
 public:
  virtual ~ProfileHooks() = default;
  // A module's forward starts / ends (nested: a container encloses its children).
  virtual void layer_enter(const void* layer) {}
  virtual void layer_exit(const void* layer) {}
  // One Tensor/freight::backward() call: from the start (before the graph walk) to the end.
  virtual void backward_begin() {}
  virtual void backward_end() {}
  // One graph node of that backward pass: its rule, the zero-filling of unused outputs and the
  // delivery (accumulation) of its input gradients. `layer` is the tag of the scope the op was
  // recorded in (null outside any module); `op` its name ("linear", "accumulate_grad", ...).
  virtual void node_begin(const void* layer, const char* op) {}
  virtual void node_end(const void* layer, const char* op) {}
};

// Installs `hooks` for the calling thread (nullptr: off). Not owned.
void set_profile_hooks(ProfileHooks* hooks);
ProfileHooks* profile_hooks();

// The innermost open layer scope of the calling thread (null when none).
const void* current_layer();

// Tags ops recorded during its lifetime with `layer`, and reports enter/exit to the hooks.
class LayerScope {
 public:
  explicit LayerScope(const void* layer);
  ~LayerScope();
  LayerScope(const LayerScope&) = delete;
  LayerScope& operator=(const LayerScope&) = delete;

 private:
  const void* layer_;
  const void* previous_;
};

}  // namespace freight
