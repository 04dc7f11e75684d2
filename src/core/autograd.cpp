// The backward engine: a dependency count over the graph reachable from the roots, then nodes
// are run once all their consumers have delivered gradients (reverse topological order).
#include <fmt/format.h>

#include <algorithm>
#include <unordered_map>

#include "core/autograd_node.h"
#include "core/core_kernels.h"
#include "core/tensor_impl.h"
#include "freight/error.h"
#include "freight/profiler.h"

namespace freight {

namespace {
thread_local bool g_grad_enabled = true;

bool input_requires_grad(const Tensor& t) {
  return t.defined() && (t.impl()->requires_grad || t.impl()->grad_fn);
}

// The edge a gradient for tensor `t` flows along.
Edge edge_of(const Tensor& t) {
  TensorImpl* impl = t.impl();
  if (impl->grad_fn) return {impl->grad_fn, impl->output_nr};
  if (!impl->requires_grad) return {};
  if (!impl->grad_acc) {
    auto acc = std::make_shared<Node>();
    acc->name = "accumulate_grad";
    acc->accumulates = true;
    acc->leaf = t.impl_ptr();
    acc->layer = current_layer();  // the layer that owns the parameter uses it first
    acc->outputs.push_back({impl->shape, impl->dtype, impl->storage->device});
    impl->grad_acc = acc;
  }
  return {impl->grad_acc, 0};
}

// Sum of two gradients arriving at the same output (a tensor used twice): what the op add
// computes (the same kernel into a fresh tensor; nothing is recorded during backward), called
// through the slot so that the core needs nothing from the ops layer.
Tensor accumulate(Tensor a, const Tensor& b) {
  if (!a.defined()) return b;
  FREIGHT_CHECK(a.shape() == b.shape(),
                fmt::format("autograd: gradient of shape {} cannot be added to one of shape {}",
                            shape_str(b.shape()), shape_str(a.shape())));
  FREIGHT_CHECK(a.device() == b.device() && a.dtype() == b.dtype(),
                fmt::format("autograd: gradient of dtype {} on {} cannot be added to one of "
                            "dtype {} on {}",
                            dtype_name(b.dtype()), b.device().str(), dtype_name(a.dtype()),
                            a.device().str()));
  Tensor sum = Tensor::empty(a.shape(), a.dtype(), a.device());
  if (sum.numel() > 0) kernels::binary(a.device().type, BinaryOp::Add, a, b, sum);
  return sum;
}

void accumulate_into_leaf(Node& acc, const Tensor& g) {
  auto leaf = acc.leaf.lock();
  if (!leaf) return;
  FREIGHT_CHECK(g.shape() == leaf->shape,
                fmt::format("autograd: gradient of shape {} for a parameter of shape {}",
                            shape_str(g.shape()), shape_str(leaf->shape)));
  if (!leaf->grad.defined()) {
    // Steal the buffer when nobody else can see it (the common case), else copy it, so that a
    // later in-place accumulation never writes through a view of someone else's tensor.
    bool exclusive = g.impl_ptr().use_count() == 1 && g.impl()->storage.use_count() == 1 &&
                     g.is_contiguous() && g.dtype() == leaf->dtype;
    leaf->grad = exclusive ? g : g.detach().clone();
  } else {
    kernels::axpy(leaf->grad.device().type, 1.0, g.contiguous(), leaf->grad);
  }
}
}  // namespace

bool grad_enabled() {
  return g_grad_enabled;
}
void set_grad_enabled(bool on) {
  g_grad_enabled = on;
}

bool needs_grad(std::initializer_list<const Tensor*> inputs) {
  if (!g_grad_enabled) return false;
  for (const Tensor* t : inputs)
    if (input_requires_grad(*t)) return true;
  return false;
}

bool needs_grad(const std::vector<Tensor>& inputs) {
  if (!g_grad_enabled) return false;
  for (const Tensor& t : inputs)
    if (input_requires_grad(t)) return true;
  return false;
}

void record(const char* name, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
            BackwardFn backward) {
  auto node = std::make_shared<Node>();
  node->name = name;
  node->layer = current_layer();
  node->next.reserve(inputs.size());
  for (const Tensor& t : inputs) node->next.push_back(input_requires_grad(t) ? edge_of(t) : Edge{});
  node->outputs.reserve(outputs.size());
  for (uint32_t i = 0; i < outputs.size(); ++i) {
    TensorImpl* impl = outputs[i].impl();
    node->outputs.push_back({impl->shape, impl->dtype, impl->storage->device});
    impl->grad_fn = node;
    impl->output_nr = i;
  }
  node->backward = std::move(backward);
}

const char* grad_fn_name(const Tensor& t) {
  return t.defined() && t.impl()->grad_fn ? t.impl()->grad_fn->name : "";
}

// Reports the span of a backward pass and of each node to the profiling hooks, if any; the
// destructors close the spans on every path out (a node that `continue`s, an exception).
struct BackwardSpan {
  ProfileHooks* hooks;
  explicit BackwardSpan(ProfileHooks* h) : hooks(h) {
    if (hooks) [[unlikely]]
      hooks->backward_begin();
  }
  ~BackwardSpan() {
    if (hooks) [[unlikely]]
      hooks->backward_end();
  }
};
struct NodeSpan {
  ProfileHooks* hooks;
  const Node* node;
  NodeSpan(ProfileHooks* h, const Node* n) : hooks(h), node(n) {
    if (hooks) [[unlikely]]
      hooks->node_begin(node->layer, node->name);
  }
  ~NodeSpan() {
    if (hooks) [[unlikely]]
      hooks->node_end(node->layer, node->name);
  }
};

void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
              bool retain_graph) {
  BackwardSpan span(profile_hooks());
  FREIGHT_CHECK(grads.empty() || grads.size() == roots.size(),
                "backward: give one gradient per root (or none)");
  NoGradGuard no_grad;  // backward rules are not themselves recorded

  std::vector<std::pair<Edge, Tensor>> seeds;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& r = roots[i];
    FREIGHT_CHECK(r.defined(), "backward: undefined root tensor");
    Tensor g = grads.empty() ? Tensor() : grads[i];
    if (!g.defined()) {
      FREIGHT_CHECK(r.numel() == 1,
                    fmt::format("backward: the root has shape {}; only a single-element tensor "
                                "(a loss) can start backward without an explicit gradient",
                                shape_str(r.shape())));
      g = Tensor::ones(r.shape(), r.dtype(), r.device());
    }
    FREIGHT_CHECK(input_requires_grad(r),
                  "backward: the root does not require grad (no parameter took part in it, or "
                  "it was computed under NoGradGuard)");
    seeds.push_back({edge_of(r), g});
  }

  // Count, for each node, how many edges from reachable nodes point at it.
  std::unordered_map<Node*, int> deps;
  std::vector<Node*> stack;
  for (auto& [e, g] : seeds) {
    if (!deps.count(e.node.get())) {
      deps[e.node.get()] = 0;
      stack.push_back(e.node.get());
    }
  }
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next) {
      if (!e.node) continue;
      auto [it, inserted] = deps.try_emplace(e.node.get(), 0);
      it->second++;
      if (inserted) stack.push_back(e.node.get());
    }
  }

  // Leaves with a gradient sink learn whether this pass delivers them one gradient only (an
  // accumulator with one incoming edge); the guard clears the marks on every way out.
  struct SoleMarks {
    std::vector<std::shared_ptr<GradSink>> marked;
    ~SoleMarks() {
      for (auto& s : marked) s->sole = false;
    }
  } sole_marks;
  for (auto& [node, count] : deps) {
    if (!node->accumulates || retain_graph) continue;  // a second pass would see the update
    auto leaf = node->leaf.lock();
    if (leaf && leaf->grad_sink && count == 1) {
      leaf->grad_sink->sole = true;
      sole_marks.marked.push_back(leaf->grad_sink);
    }
  }

  std::unordered_map<Node*, std::vector<Tensor>> pending;
  std::unordered_map<Node*, std::shared_ptr<Node>> keep;  // keeps nodes alive while queued
  auto deliver = [&](const Edge& e, const Tensor& g) {
    auto& slot = pending[e.node.get()];
    if (slot.empty()) slot.resize(e.node->outputs.size());
    slot[e.slot] = accumulate(slot[e.slot], g);
    keep.try_emplace(e.node.get(), e.node);
  };
  std::vector<Node*> ready;
  for (auto& [e, g] : seeds) deliver(e, g);
  for (auto& [e, g] : seeds)
    if (deps[e.node.get()] == 0) ready.push_back(e.node.get());
  // A node listed twice among the seeds must run once.
  std::sort(ready.begin(), ready.end());
  ready.erase(std::unique(ready.begin(), ready.end()), ready.end());

  while (!ready.empty()) {
    Node* n = ready.back();
    ready.pop_back();
    std::vector<Tensor> gouts;
    if (auto it = pending.find(n); it != pending.end()) {
      gouts = std::move(it->second);
      pending.erase(it);
    }
    std::shared_ptr<Node> hold;  // keeps `n` alive while it runs
    if (auto it = keep.find(n); it != keep.end()) {
      hold = std::move(it->second);
      keep.erase(it);
    }
    NodeSpan node_span(span.hooks, n);
    bool any = false;
    for (const Tensor& g : gouts) any = any || g.defined();

    if (n->accumulates) {
      if (any) {
        accumulate_into_leaf(*n, gouts[0]);
        // Every contribution of this pass is in (the node ran once all of them had arrived).
        if (auto leaf = n->leaf.lock(); leaf && leaf->grad_accumulated) leaf->grad_accumulated();
      }
      continue;
    }
    std::vector<Tensor> gins;
    if (any) {
      FREIGHT_CHECK(n->backward != nullptr,
                    fmt::format("backward: the graph through '{}' was already freed by an "
                                "earlier backward(); pass retain_graph=true to run it twice",
                                n->name));
      for (size_t i = 0; i < gouts.size(); ++i) {
        if (!gouts[i].defined()) {
          const OutputMeta& m = n->outputs[i];
          gouts[i] = Tensor::zeros(m.shape, m.dtype, m.device);
        }
      }
      gins = n->backward(gouts);
      if (!retain_graph) n->backward = nullptr;
      FREIGHT_CHECK(gins.size() == n->next.size(),
                    fmt::format("autograd: '{}' returned {} gradients for {} inputs", n->name,
                                gins.size(), n->next.size()));
    }
    // Children are released once every consumer has run, whether or not it produced anything.
    for (size_t i = 0; i < n->next.size(); ++i) {
      const Edge& e = n->next[i];
      if (!e.node) continue;
      if (any && gins[i].defined()) deliver(e, gins[i]);
      keep.try_emplace(e.node.get(), e.node);
      if (--deps[e.node.get()] == 0) ready.push_back(e.node.get());
    }
  }
}

void set_grad_accumulated_hook(const Tensor& leaf, std::function<void()> hook) {
  FREIGHT_CHECK(leaf.defined() && leaf.impl()->requires_grad && !leaf.impl()->grad_fn,
                "set_grad_accumulated_hook: the tensor must be a leaf that requires grad (a "
                "parameter)");
  leaf.impl()->grad_accumulated = std::move(hook);
}

void set_grad_sink(const Tensor& leaf, std::shared_ptr<GradSink> sink) {
  if (!sink) {  // removing one never fails (optimizers do it in their destructors)
    if (leaf.defined()) leaf.impl()->grad_sink = nullptr;
    return;
  }
  FREIGHT_CHECK(leaf.defined() && leaf.impl()->requires_grad && !leaf.impl()->grad_fn,
                "set_grad_sink: the tensor must be a leaf that requires grad (a parameter)");
  FREIGHT_CHECK(sink->take_product, "set_grad_sink: the sink has no take_product function");
  sink->filled = sink->sole = false;
  leaf.impl()->grad_sink = std::move(sink);
}

GradSink* sole_grad_sink(const std::weak_ptr<TensorImpl>& leaf) {
  auto impl = leaf.lock();
  if (!impl || !impl->grad_sink) return nullptr;
  GradSink* s = impl->grad_sink.get();
  return s->sole && !s->filled && !impl->grad.defined() ? s : nullptr;
}

void Tensor::backward(const Tensor& grad, bool retain_graph) const {
  freight::backward({*this}, grad.defined() ? std::vector<Tensor>{grad} : std::vector<Tensor>{},
                    retain_graph);
}

}  // namespace freight
