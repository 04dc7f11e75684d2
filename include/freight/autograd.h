// Reverse-mode automatic differentiation. Every differentiable op run while gradients are
// enabled records a node on the graph (the "tape") that points at the nodes of its inputs;
// Tensor::backward() walks it in reverse topological order and fills leaf tensors' .grad().
#pragma once
#include <functional>
#include <vector>

#include "freight/tensor.h"

namespace freight {

bool grad_enabled();
void set_grad_enabled(bool on);

// Disables recording for its lifetime (evaluation, optimizer updates).
class NoGradGuard {
 public:
  NoGradGuard() : previous_(grad_enabled()) { set_grad_enabled(false); }
  ~NoGradGuard() { set_grad_enabled(previous_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

// Backward from several roots at once; grads[i] may be undefined for a scalar root (then 1).
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads = {},
              bool retain_graph = false);

// Calls `hook` during every backward pass that reaches `leaf` (a parameter), once the pass has
// added its whole gradient into leaf.grad(): after the last of the leaf's uses has delivered its
// part, before backward returns. Data parallelism starts summing a bucket of gradients over the
// ranks there, while the rest of backward runs. An empty function removes the hook.
void set_grad_accumulated_hook(const Tensor& leaf, std::function<void()> hook);

// Name of the op that produced `t` ("linear", "relu", ...), or "" for a leaf.
const char* grad_fn_name(const Tensor& t);

}  // namespace freight
