// Tensor: a view (shape, strides, offset) of reference-counted storage on one device, with the
// autograd state (requires_grad, grad, the node that produced it). Copying a Tensor copies the
// handle, not the data, as in PyTorch.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "freight/device.h"
#include "freight/dtype.h"
#include "freight/shape.h"

namespace freight {

struct TensorImpl;
struct Node;
class Generator;

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- construction (device defaults to the CPU) ----
  static Tensor empty(const Shape& shape, DType dtype = DType::F32, Device device = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dtype = DType::F32, Device device = Device::cpu());
  static Tensor ones(const Shape& shape, DType dtype = DType::F32, Device device = Device::cpu());
  static Tensor full(const Shape& shape, double value, DType dtype = DType::F32,
                     Device device = Device::cpu());
  static Tensor from_vector(const std::vector<float>& values, const Shape& shape,
                            Device device = Device::cpu());
  static Tensor from_vector(const std::vector<double>& values, const Shape& shape,
                            Device device = Device::cpu());
  static Tensor from_vector(const std::vector<int64_t>& values, const Shape& shape,
                            Device device = Device::cpu());
  static Tensor scalar(double value, DType dtype = DType::F32, Device device = Device::cpu());
  // Random tensors from a seeded generator (the global one when none is given).
  static Tensor uniform(const Shape& shape, double lo, double hi, DType dtype = DType::F32,
                        Device device = Device::cpu(), Generator* gen = nullptr);
  static Tensor normal(const Shape& shape, double mean = 0, double std = 1,
                       DType dtype = DType::F32, Device device = Device::cpu(),
                       Generator* gen = nullptr);
  static Tensor randint(const Shape& shape, int64_t lo, int64_t hi, Device device = Device::cpu(),
                        Generator* gen = nullptr);

  // ---- metadata ----
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const;
  const Shape& strides() const;
  int64_t dim() const;
  int64_t size(int64_t d) const;  // negative d counts from the end
  int64_t numel() const;
  int64_t offset() const;  // in elements, into the storage
  DType dtype() const;
  Device device() const;
  bool is_contiguous() const;
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype()); }
  std::string str(int max_elements = 16) const;  // shape, dtype, device and the first elements

  // ---- raw data (pointer to the first element of this view) ----
  void* data_ptr() const;
  template <class T>
  T* data() const;  // checks that T matches the dtype

  // ---- copies and views ----
  Tensor to(Device device) const;  // copy to another device (same device: returns *this)
  Tensor to(DType dtype) const;    // converted copy (same dtype: returns *this)
  Tensor contiguous() const;       // *this if already contiguous, else a packed copy (differentiable)
  Tensor clone() const;            // packed copy (differentiable)
  Tensor detach() const;           // shares storage, drops the autograd history
  void copy_(const Tensor& src);   // copies values from src (same shape; any devices, dtypes)
  void fill_(double value);
  void zero_() { fill_(0.0); }

  Tensor reshape(const Shape& shape) const;  // one dim may be -1; view when possible
  Tensor view(const Shape& shape) const;     // must be contiguous
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor transpose(int64_t d0, int64_t d1) const;  // view
  Tensor permute(const std::vector<int64_t>& dims) const;  // view
  Tensor t() const { return transpose(0, 1); }
  Tensor slice(int64_t dim, int64_t start, int64_t end) const;  // view of [start, end) on dim
  Tensor select(int64_t dim, int64_t index) const;  // view, removes dim
  Tensor unsqueeze(int64_t dim) const;
  Tensor squeeze(int64_t dim) const;

  // ---- values on the host ----
  double item() const;  // one-element tensor; copies from the device if needed
  std::vector<float> to_float_vector() const;
  std::vector<double> to_double_vector() const;
  std::vector<int64_t> to_int_vector() const;

  // ---- autograd ----
  bool requires_grad() const;
  Tensor& set_requires_grad(bool on = true);
  Tensor grad() const;  // undefined until a backward pass reaches this tensor
  void set_grad(const Tensor& g) const;
  void zero_grad() const;  // drops the gradient (next backward writes a fresh one)
  bool is_leaf() const;
  const std::shared_ptr<Node>& grad_fn() const;
  // Runs the backward pass from this tensor (a scalar unless `grad` is given).
  void backward(const Tensor& grad = Tensor(), bool retain_graph = false) const;

  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool same(const Tensor& other) const { return impl_ == other.impl_; }

 private:
  std::shared_ptr<TensorImpl> impl_;
};

// Arithmetic operators (differentiable, broadcasting); defined in ops.
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, double s);
Tensor operator*(double s, const Tensor& a);
Tensor operator-(const Tensor& a);

}  // namespace freight
