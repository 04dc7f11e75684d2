// freight::nn::Module: the base of every layer and container, with PyTorch's ergonomics.
// A module owns named parameters (trainable leaf tensors), named buffers (state such as
// BatchNorm's running statistics) and named child modules. Names and order follow PyTorch, so a
// state_dict lists, for each module in pre-order, its parameters, then its buffers, then its
// children's entries under "<child>." prefixes ("0.weight", "1.running_mean", "lstm.weight_ih_l0").
// Modules are held by std::shared_ptr<Module>.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "freight/device.h"
#include "freight/dtype.h"
#include "freight/profiler.h"
#include "freight/shape.h"
#include "freight/tensor.h"

namespace freight::nn {

class Module;
using ModulePtr = std::shared_ptr<Module>;
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;
using NamedModules = std::vector<std::pair<std::string, ModulePtr>>;

class Module {
 public:
  explicit Module(std::string type_name);
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  virtual Tensor forward(const Tensor& x) = 0;
  // Calls forward() with this module as the current layer tag (freight/profiler.h): ops it
  // records are attributed to it by `freight explain`. Containers call children through it.
  Tensor operator()(const Tensor& x) {
    LayerScope scope(this);
    return forward(x);
  }

  // ---- description ----
  const std::string& type_name() const { return type_name_; }  // "Linear"
  // One line with the hyper-parameters: "Linear(784, 512)", "Conv2d(1, 6, kernel=5, padding=2)".
  virtual std::string describe() const;
  // The whole tree, PyTorch's print(model) layout: "Sequential(\n  (0): Linear(784, 512)\n...)".
  std::string to_string() const;

  // ---- shape and cost for a given input shape (for `freight summary`) ----
  // The output shape for an input of shape `in` (the default keeps the shape); the error names
  // the layer and the shape when `in` does not fit.
  virtual Shape output_shape(const Shape& in) const;
  // Floating-point operations of one forward call on an input of shape `in`, counting a
  // multiply-add as 2 (so a GEMM [m,k]x[k,n] is 2mkn) and each elementwise operation as 1.
  virtual double flops(const Shape& in) const;
  // Bytes one forward call moves to and from memory for an input of shape `in`, as float32:
  // by default its input, its output and its parameters (each read or written once); layers
  // that touch more (LSTM gates) or less (an embedding's looked-up rows) say so. Containers sum
  // their children. A lower bound that ignores cache reuse, for roofline estimates.
  virtual double bytes(const Shape& in) const;
  // Bytes its kernels on `device` take from the allocator while one of its passes runs, beyond
  // the tensors it reads and writes (a convolution's unrolled chunks or blocked copies), for an
  // input of shape `in` (`input_grad`: whether the backward computes the input's gradient): 0
  // by default and for containers (each child answers for itself).
  virtual int64_t workspace_bytes(const Shape& in, Device device, bool input_grad) const {
    return 0;
  }

  // ---- parameters, buffers, children ----
  NamedTensors named_parameters() const;  // recursive, "0.weight", ...; the live handles
  std::vector<Tensor> parameters() const;
  NamedTensors named_buffers() const;  // recursive
  const NamedModules& named_children() const { return children_; }
  NamedModules named_modules() const;  // pre-order, this module first under the name ""
  int64_t num_parameters() const;      // total elements of all parameters

  // Parameters and buffers in PyTorch's state_dict order, detached (sharing storage).
  NamedTensors state_dict() const;
  // Copies every entry into the matching tensor (converting device and dtype). Strict: a missing
  // or unexpected key, or a shape mismatch, is a freight::Error that lists every such key with
  // both shapes, and nothing is copied.
  void load_state_dict(const NamedTensors& state);

  // ---- mode, placement, gradients ----
  void train(bool on = true);  // recursive; Dropout and BatchNorm read it
  void eval() { train(false); }
  bool is_training() const { return training_; }
  // Moves parameters (with their gradients) and buffers in place: tensor handles held elsewhere,
  // e.g. by an optimizer, stay valid and see the moved data.
  Module& to(Device device);
  // Converts floating parameters and buffers in place (integer buffers keep their dtype).
  Module& to(DType dtype);
  void zero_grad();  // drops every parameter's gradient

 protected:
  // Registration order is state_dict order. A parameter is marked requires_grad. The returned
  // handle shares the registered tensor; layers keep it as a member.
  Tensor register_parameter(const std::string& name, Tensor t);
  Tensor register_buffer(const std::string& name, Tensor t);
  ModulePtr register_module(const std::string& name, ModulePtr module);
  // Called on each module after load_state_dict has written its tensors (for host-side copies
  // of buffer values, such as BatchNorm's batch counter).
  virtual void on_state_loaded() {}

 private:
  void check_new_name(const std::string& name) const;
  void collect(const std::string& prefix, bool params, bool buffers, NamedTensors& out) const;
  void convert(Device device, DType dtype, bool change_device);

  std::string type_name_;
  bool training_ = true;
  NamedTensors params_;
  NamedTensors buffers_;
  NamedModules children_;
};

}  // namespace freight::nn
