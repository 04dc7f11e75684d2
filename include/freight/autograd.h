// Reverse-mode automatic differentiation. Every differentiable op run while gradients are
// enabled records a node on the graph (the "tape") that points at the nodes of its inputs;
// Tensor::backward() walks it in reverse topological order and fills leaf tensors' .grad().
#pragma once
#include <functional>
#include <memory>
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

// A gradient sink lets the op that produces a leaf's whole gradient in a backward pass hand it
// over in factored form instead of writing it into leaf.grad(): a linear layer's weight gradient
// is the product aᵀ·b of the output gradient a [rows, out] and the input b [rows, in], and an
// optimizer that applies it band of rows by band of rows while each band is still in cache never
// writes the gradient out nor reads it back (Optimizer::set_fused_backward). `take_product`
// returns false to decline (the op then computes the gradient as usual). An op offers it only
// when it is the leaf's sole contributor in the pass, leaf.grad() is empty and the graph is not
// retained; it then sets `filled` and returns no gradient for the leaf. Other ops, and a leaf
// used twice, ignore the sink and fill leaf.grad() as usual. A null sink removes it. The linear
// op's weight gradient is the one taker so far.
struct GradSink {
  std::function<bool(const Tensor& a, const Tensor& b)> take_product;
  bool filled = false;
  bool sole = false;  // set by backward() while it runs: the pass delivers one gradient only
};
void set_grad_sink(const Tensor& leaf, std::shared_ptr<GradSink> sink);

// Name of the op that produced `t` ("linear", "relu", ...), or "" for a leaf.
const char* grad_fn_name(const Tensor& t);

}  // namespace freight
