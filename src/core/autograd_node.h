// Nodes of the autograd graph and the helper ops use to record themselves. Internal.
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "freight/autograd.h"
#include "freight/tensor.h"

namespace freight {

struct Node;

// Where an input's gradient goes: output `slot` of `node` (null when the input needs none).
struct Edge {
  std::shared_ptr<Node> node;
  uint32_t slot = 0;
};

struct OutputMeta {
  Shape shape;
  DType dtype;
  Device device;
};

// Receives the gradients of the node's outputs (undefined ones are replaced by zeros before the
// call) and returns one gradient per input (undefined where the input needs none).
using BackwardFn = std::function<std::vector<Tensor>(const std::vector<Tensor>& grad_outputs)>;

struct Node {
  const char* name = "";
  std::vector<Edge> next;           // one per input
  std::vector<OutputMeta> outputs;  // to build zero gradients for outputs nobody used
  BackwardFn backward;              // released after use unless the graph is retained
  bool accumulates = false;         // a leaf's gradient accumulator (no backward rule)
  std::weak_ptr<TensorImpl> leaf;   // the leaf it accumulates into
  const void* layer = nullptr;      // the LayerScope open when it was recorded (profiling)
};

// The sink (freight/autograd.h) an op may hand `leaf`'s gradient to during the running backward
// pass, or null: the leaf is alive and has an unfilled sink, the pass delivers it one gradient
// only and does not retain the graph, and its grad() is empty. When take_product accepts, the
// caller sets `filled` and returns no gradient for the leaf.
GradSink* sole_grad_sink(const std::weak_ptr<TensorImpl>& leaf);

// True when the op must record a node: gradients are enabled and some input requires grad.
bool needs_grad(std::initializer_list<const Tensor*> inputs);
bool needs_grad(const std::vector<Tensor>& inputs);

// Records `outputs` as produced by op `name` from `inputs`; `backward` maps output gradients to
// input gradients. Closures must capture saved tensors through detach() (never an output itself:
// that would make a reference cycle through its own node).
void record(const char* name, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
            BackwardFn backward);

}  // namespace freight
