// DLPack both ways (Debian's libdlpack-dev, dlpack/dlpack.h): freight.Tensor has __dlpack__ and
// __dlpack_device__, so torch.from_dlpack(t) and np.from_dlpack(t) share its memory, and
// freight.from_dlpack(x) shares the memory of anything that has them (a torch.Tensor, a NumPy
// array) or of a "dltensor" capsule (torch.utils.dlpack.to_dlpack). Nothing is copied, on the
// CPU or on a GPU.
//
// Streams (GPU): the producer must make the memory ready for the consumer's stream. Exporting,
// Freight waits for its own stream to finish before handing out the capsule, which is correct
// for any consumer stream. Importing, Freight passes its own stream to the producer's
// __dlpack__(stream=...), which makes that stream wait for the producer's pending work (PyTorch
// records an event on its current stream and makes ours wait on it).
#include <dlpack/dlpack.h>
#include <fmt/format.h>

#include "bindings.h"
#include "freight/error.h"
#include "freight/external.h"
#include "freight/runtime.h"

namespace freight::python {

namespace {

constexpr const char* kCapsuleName = "dltensor";
constexpr const char* kUsedCapsuleName = "used_dltensor";

DLDataType dl_dtype(DType t) {
  switch (t) {
    case DType::F32:
      return {kDLFloat, 32, 1};
    case DType::F64:
      return {kDLFloat, 64, 1};
    case DType::BF16:
      return {kDLBfloat, 16, 1};
    case DType::I32:
      return {kDLInt, 32, 1};
    case DType::I64:
      return {kDLInt, 64, 1};
    case DType::U8:
      return {kDLUInt, 8, 1};
  }
  throw Error("unknown dtype");
}

DType freight_dtype(DLDataType t) {
  if (t.lanes == 1) {
    if (t.code == kDLFloat && t.bits == 32) return DType::F32;
    if (t.code == kDLFloat && t.bits == 64) return DType::F64;
    if (t.code == kDLBfloat && t.bits == 16) return DType::BF16;
    if (t.code == kDLInt && t.bits == 32) return DType::I32;
    if (t.code == kDLInt && t.bits == 64) return DType::I64;
    if (t.code == kDLUInt && t.bits == 8) return DType::U8;
  }
  throw Error(
      fmt::format("from_dlpack: a tensor of DLPack type (code {}, {} bits, {} lanes) has "
                  "no Freight dtype: Freight holds float32, float64, bfloat16, int32, "
                  "int64 and uint8",
                  int(t.code), int(t.bits), int(t.lanes)));
}

// What a capsule owns: the exported tensor (keeping its storage alive) and the shape and strides
// arrays the DLTensor points into.
struct Exported {
  DLManagedTensor managed{};
  Tensor tensor;
  std::vector<int64_t> shape, strides;
};

void delete_exported(DLManagedTensor* m) {
  delete static_cast<Exported*>(m->manager_ctx);
}

// A capsule that no consumer took: its destructor frees what it owns.
void capsule_destructor(PyObject* capsule) {
  if (!PyCapsule_IsValid(capsule, kCapsuleName)) return;  // consumed: the consumer owns it
  auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, kCapsuleName));
  if (m && m->deleter) m->deleter(m);
}

py::capsule to_capsule(const Tensor& t) {
  if (t.device().is_cuda()) {
    py::gil_scoped_release nogil;
    synchronize(t.device());  // ready for whatever stream the consumer reads it on
  }
  auto* e = new Exported;
  e->tensor = t.detach();
  e->shape = t.shape();
  e->strides = t.strides();
  DLTensor& d = e->managed.dl_tensor;
  d.data = t.data_ptr();
  d.device =
      t.device().is_cuda() ? DLDevice{kDLCUDA, int32_t(t.device().index)} : DLDevice{kDLCPU, 0};
  d.ndim = int32_t(e->shape.size());
  d.dtype = dl_dtype(t.dtype());
  d.shape = e->shape.data();
  d.strides = e->strides.data();
  d.byte_offset = 0;
  e->managed.manager_ctx = e;
  e->managed.deleter = delete_exported;
  return py::capsule(&e->managed, kCapsuleName, capsule_destructor);
}

Tensor from_capsule(py::capsule capsule) {
  if (!PyCapsule_IsValid(capsule.ptr(), kCapsuleName))
    throw Error(
        "from_dlpack: the capsule is not an unused DLPack tensor ('dltensor'): a capsule "
        "can be consumed once");
  auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), kCapsuleName));
  const DLTensor& d = m->dl_tensor;
  Device device;
  if (d.device.device_type == kDLCPU || d.device.device_type == kDLCUDAHost)
    device = Device::cpu();
  else if (d.device.device_type == kDLCUDA)
    device = Device::cuda(d.device.device_id);
  else
    throw Error(
        fmt::format("from_dlpack: memory on DLPack device type {} is neither the CPU nor "
                    "a CUDA GPU",
                    int(d.device.device_type)));
  const DType dtype = freight_dtype(d.dtype);
  Shape shape(d.shape, d.shape + d.ndim), strides;
  if (d.strides) {
    strides.assign(d.strides, d.strides + d.ndim);
  } else {
    strides.assign(size_t(d.ndim), 1);  // no strides: compact, row-major
    for (int i = d.ndim - 1; i > 0; --i)
      strides[size_t(i - 1)] = strides[size_t(i)] * shape[size_t(i)];
  }
  void* data = static_cast<char*>(d.data) + d.byte_offset;
  // Checked before the capsule is marked used: on an error the producer still frees it.
  Tensor t = from_external(data, shape, strides, dtype, device, [m] {
    // The producer's deleter may touch Python objects (NumPy's does, taking the GIL itself).
    if (m->deleter) m->deleter(m);
  });
  PyCapsule_SetName(capsule.ptr(), kUsedCapsuleName);
  return t;
}

}  // namespace

void bind_dlpack(py::module_& m) {
  auto tensor = py::reinterpret_borrow<py::class_<Tensor>>(m.attr("Tensor"));
  tensor.def(
      "__dlpack__", [](const Tensor& t, py::object stream) { return to_capsule(t); },
      py::arg("stream") = py::none(),
      "A DLPack capsule sharing this tensor's memory (GPU work on it is finished first).");
  tensor.def("__dlpack_device__", [](const Tensor& t) {
    return t.device().is_cuda() ? py::make_tuple(int(kDLCUDA), t.device().index)
                                : py::make_tuple(int(kDLCPU), 0);
  });
  m.def(
      "from_dlpack",
      [](py::object x) {
        if (py::isinstance<py::capsule>(x)) return from_capsule(x.cast<py::capsule>());
        if (!py::hasattr(x, "__dlpack__"))
          throw Error(fmt::format("from_dlpack: a {} has no __dlpack__ method",
                                  std::string(py::str(py::type::handle_of(x).attr("__name__")))));
        py::object capsule;
        py::tuple where = x.attr("__dlpack_device__")();
        if (where[0].cast<int>() == int(kDLCUDA)) {
          const Device gpu = Device::cuda(where[1].cast<int>());
          capsule = x.attr("__dlpack__")(py::arg("stream") = device_stream(gpu));
        } else {
          capsule = x.attr("__dlpack__")();
        }
        return from_capsule(capsule.cast<py::capsule>());
      },
      py::arg("x"),
      "A tensor sharing the memory of x (a torch.Tensor, a NumPy array, a DLPack capsule).");
}

}  // namespace freight::python
