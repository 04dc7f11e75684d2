// The storage and view behind a Tensor handle, and its autograd state. Internal.
#pragma once
#include <functional>
#include <memory>

#include "freight/autograd.h"
#include "freight/device.h"
#include "freight/dtype.h"
#include "freight/shape.h"
#include "freight/tensor.h"

namespace freight {

struct Node;

// A block of device memory owned through the device's allocator (returned to it on destruction).
// Pinned storage is host memory (device CPU) from the CUDA backend's page-locked cache,
// allocated in GPU `pinned_for`'s context and given back to that cache.
struct Storage {
  void* data = nullptr;
  size_t nbytes = 0;
  Device device;
  int pinned_for = -1;            // >= 0: page-locked host memory (see above)
  std::function<void()> release;  // set: external memory, handed back through it
  Storage(size_t bytes, Device dev);
  Storage(size_t bytes, Device cpu, int pinned_for_gpu);
  // Memory Freight did not allocate (freight/external.h): never freed here; `release` runs
  // once, when the last tensor viewing it is gone.
  Storage(void* external, size_t bytes, Device dev, std::function<void()> release);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  int64_t offset = 0;  // elements
  Shape shape;
  Shape strides;
  int64_t numel = 0;
  DType dtype = DType::F32;
  bool contiguous = true;

  // autograd
  bool requires_grad = false;      // leaf flag set by the user (parameters)
  std::shared_ptr<Node> grad_fn;   // the node that produced this tensor (non-leaf)
  uint32_t output_nr = 0;          // which output of grad_fn this tensor is
  Tensor grad;                     // accumulated gradient (leaves)
  std::shared_ptr<Node> grad_acc;  // a leaf's accumulator node, created on first use
  // Runs after each backward pass's final accumulation into `grad` (set_grad_accumulated_hook).
  std::function<void()> grad_accumulated;
  std::shared_ptr<GradSink> grad_sink;  // set_grad_sink (freight/autograd.h)

  char* byte_ptr() const {
    return static_cast<char*>(storage->data) + offset * int64_t(dtype_size(dtype));
  }
  void recompute_layout();  // numel and the contiguous flag from shape and strides
};

// A new tensor that views `base`'s storage with another shape/strides/offset (no autograd state).
Tensor make_view(const Tensor& base, Shape shape, Shape strides, int64_t offset);

}  // namespace freight
