// The pieces of the Python module `freight._freight`, one file per part of the API; module.cpp
// puts them together.
#pragma once
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "freight/tensor.h"

namespace freight::python {

namespace py = pybind11;

void bind_tensor(py::module_& m);    // freight.Tensor, creation, NumPy's buffer protocol
void bind_ops(py::module_& m);       // the differentiable functions, autograd switches
void bind_dlpack(py::module_& m);    // __dlpack__, __dlpack_device__, from_dlpack
void bind_nn(py::module_& m);        // freight.nn: modules, layers, models from files or dicts
void bind_data(py::module_& m);      // freight.data: datasets by name, the Loader
void bind_optim(py::module_& m);     // freight.optim: optimizers and schedules
void bind_training(py::module_& m);  // train, evaluate, explain, plan, checkpoints

// A freight.Tensor for any of: a freight.Tensor (the same handle), an object with the buffer
// protocol (a NumPy array: shared, not copied), an object with __dlpack__ (a PyTorch tensor:
// shared), or a Python number or nested list (copied into a new tensor).
Tensor as_tensor(py::handle obj);

// Device from "cpu", "cuda", "cuda:1" (or a freight device string); DType from a name such as
// "float32" or a NumPy dtype.
Device device_arg(const std::string& text);
DType dtype_arg(py::handle dtype);
// Dimensions of a reduction: one integer or a sequence of them.
std::vector<int64_t> dims_arg(py::handle dim);
// torch.argmax's arguments: dim None is the index into the flattened tensor (a 0-d result, or
// all dimensions of size 1 with keepdim); keepdim keeps dim with size 1.
Tensor argmax_arg(const Tensor& x, py::object dim, bool keepdim);

}  // namespace freight::python
