// freight.Tensor: metadata, copies and views, arithmetic operators, and NumPy's buffer protocol
// both ways. A CPU tensor exports its memory as a buffer (np.asarray(t) and t.numpy() share it);
// freight.from_numpy(a) and freight.as_tensor(a) view a buffer's memory in place, holding a
// reference to the array until the last tensor that views it is gone.
#include <fmt/format.h>

#include <pybind11/numpy.h>
#include <memory>

#include "bindings.h"
#include "freight/autograd.h"
#include "freight/error.h"
#include "freight/external.h"
#include "freight/ops.h"
#include "freight/random.h"

namespace freight::python {

namespace {

// The struct module's format character of each dtype that NumPy has (bfloat16 has none).
const char* buffer_format(DType t) {
  switch (t) {
    case DType::F32:
      return "f";
    case DType::F64:
      return "d";
    case DType::I32:
      return "i";
    case DType::I64:
      return "q";
    case DType::U8:
      return "B";
    case DType::BF16:
      break;
  }
  throw Error("a bfloat16 tensor has no NumPy dtype: convert it first with .to('float32')");
}

// The dtype of a buffer's format ("<f", "=q", "l", ...), by kind and item size.
DType dtype_from_format(std::string format, py::ssize_t itemsize) {
  if (!format.empty() && (format[0] == '>' || format[0] == '!'))
    throw Error(
        fmt::format("a big-endian buffer (format '{}') cannot be shared: convert it with "
                    "numpy's .astype('<{}') first",
                    format, format.substr(1)));
  if (!format.empty() && (format[0] == '<' || format[0] == '=' || format[0] == '@'))
    format = format.substr(1);
  if (format.size() == 1) {
    const char c = format[0];
    if (c == 'f' && itemsize == 4) return DType::F32;
    if (c == 'd' && itemsize == 8) return DType::F64;
    if ((c == 'i' || c == 'l') && itemsize == 4) return DType::I32;
    if ((c == 'l' || c == 'q') && itemsize == 8) return DType::I64;
    if (c == 'B' && itemsize == 1) return DType::U8;
  }
  throw Error(
      fmt::format("a buffer of format '{}' ({} bytes per item) has no Freight dtype: "
                  "Freight holds float32, float64, int32, int64 and uint8",
                  format, itemsize));
}

// Holds a Python object's exported buffer (so the exporter cannot resize, move or unmap it) for
// as long as a tensor views it. The last tensor may go on a thread that does not hold the GIL,
// and a tensor that fails its checks drops it at once: either way it is released under the GIL.
std::function<void()> hold_buffer(py::buffer_info info) {
  std::shared_ptr<py::buffer_info> held(new py::buffer_info(std::move(info)),
                                        [](py::buffer_info* b) {
                                          if (!Py_IsInitialized()) return;  // interpreter gone
                                          py::gil_scoped_acquire gil;
                                          delete b;
                                        });
  return [held] {};  // the storage drops the closure, and with it the buffer
}

Tensor from_buffer(py::buffer b) {
  py::buffer_info info = b.request();
  const DType dtype = dtype_from_format(info.format, info.itemsize);
  Shape shape(info.shape.begin(), info.shape.end()), strides;
  for (py::ssize_t s : info.strides) {
    if (s % info.itemsize != 0)
      throw Error(
          fmt::format("a buffer of shape {} has strides that are not whole items ({} "
                      "bytes per item): copy it with numpy's .copy() first",
                      shape_str(shape), info.itemsize));
    strides.push_back(s / info.itemsize);
  }
  void* data = info.ptr;
  const bool readonly = info.readonly;
  Tensor t =
      from_external(data, shape, strides, dtype, Device::cpu(), hold_buffer(std::move(info)));
  // A read-only array (np.frombuffer of bytes, a broadcast view) must not be written through:
  // Freight gets a copy of it instead.
  return readonly ? t.clone() : t;
}

// Nested Python lists or a number: values and shape; int64 when every value is an integer.
// Integers are kept exactly beside their double values (a double holds them only up to 2^53),
// and one beyond int64 is refused, as PyTorch does, rather than wrapped or saturated.
void collect(py::handle obj, size_t depth, Shape& shape, std::vector<double>& values,
             std::vector<int64_t>& ints, bool& all_int, std::string& too_big) {
  if (py::isinstance<py::bool_>(obj) || py::isinstance<py::int_>(obj) ||
      py::isinstance<py::float_>(obj)) {
    if (depth != shape.size() && !shape.empty())
      throw Error("freight.tensor: a nested list with rows of different depths");
    if (py::isinstance<py::float_>(obj)) {
      all_int = false;
      values.push_back(obj.cast<double>());
      return;
    }
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(obj.ptr(), &overflow);
    if (overflow != 0) {  // fine in a float tensor; from_values refuses it in an int64 one
      if (too_big.empty()) too_big = std::string(py::str(obj));
      values.push_back(obj.cast<double>());
      ints.push_back(0);
      return;
    }
    ints.push_back(int64_t(v));
    values.push_back(double(v));
    return;
  }
  if (!py::isinstance<py::sequence>(obj) || py::isinstance<py::str>(obj))
    throw Error(
        fmt::format("freight.tensor: cannot make a tensor of a {} (give a number, a "
                    "nested list, a NumPy array or a tensor)",
                    std::string(py::str(py::type::handle_of(obj).attr("__name__")))));
  if (depth >= 64) throw Error("freight.tensor: lists nested more than 64 deep");
  py::sequence seq = py::reinterpret_borrow<py::sequence>(obj);
  const int64_t n = int64_t(py::len(seq));
  if (shape.size() == depth)
    shape.push_back(n);
  else if (shape[depth] != n)
    throw Error(fmt::format("freight.tensor: rows of different lengths ({} and {}) at depth {}",
                            shape[depth], n, depth));
  for (py::handle item : seq) collect(item, depth + 1, shape, values, ints, all_int, too_big);
}

Tensor from_values(py::handle obj) {
  Shape shape;
  std::vector<double> values;
  std::vector<int64_t> ints;
  bool all_int = true;
  std::string too_big;
  collect(obj, 0, shape, values, ints, all_int, too_big);
  if (all_int && !too_big.empty())
    throw py::value_error(fmt::format(
        "freight.tensor: the integer {} does not fit in int64 (-2^63 to 2^63 - 1); give it as "
        "a float to make a float32 tensor",
        too_big));
  if (all_int) return Tensor::from_vector(ints, shape);
  return Tensor::from_vector(values, shape).to(DType::F32);
}

// A shape argument: an int or a sequence of ints (anything with __index__, as NumPy's integers),
// each >= 0; a bool is no size, and a string is no sequence of sizes.
Shape shape_arg(py::handle shape) {
  auto is_int = [](py::handle d) {
    return PyIndex_Check(d.ptr()) && !py::isinstance<py::bool_>(d);
  };
  auto size = [&](py::handle d) {
    if (!is_int(d))
      throw py::type_error(fmt::format("a shape holds ints, got {} in {}", std::string(py::repr(d)),
                                       std::string(py::repr(shape))));
    py::object i = py::reinterpret_steal<py::object>(PyNumber_Index(d.ptr()));
    if (!i) throw py::error_already_set();
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(i.ptr(), &overflow);
    if (overflow != 0 || v < 0)
      throw py::value_error(fmt::format("a shape holds sizes >= 0, got {} in {}",
                                        std::string(py::repr(d)), std::string(py::repr(shape))));
    return int64_t(v);
  };
  if (is_int(shape)) return {size(shape)};
  if (!py::isinstance<py::sequence>(shape) || py::isinstance<py::str>(shape))
    throw py::type_error(fmt::format("a shape is an int or a sequence of ints, got {}",
                                     std::string(py::repr(shape))));
  Shape out;
  for (py::handle d : py::reinterpret_borrow<py::sequence>(shape)) out.push_back(size(d));
  return out;
}

// One index of t[...]: an integer selects (and drops the dimension), a slice with step 1 views.
Tensor index_one(const Tensor& t, int64_t& dim, py::handle index) {
  if (dim >= t.dim())
    throw py::index_error(
        fmt::format("too many indices: {} finds no dimension left to index "
                    "(the indices before it leave shape {})",
                    std::string(py::repr(index)), shape_str(t.shape())));
  if (py::isinstance<py::int_>(index)) {
    int64_t i = index.cast<int64_t>(), n = t.size(dim);
    if (i < -n || i >= n)
      throw py::index_error(
          fmt::format("index {} is out of range for dimension {} of size {}", i, dim, n));
    return t.select(dim, i < 0 ? i + n : i);
  }
  if (py::isinstance<py::slice>(index)) {
    py::ssize_t start, stop, step, length;
    if (!py::reinterpret_borrow<py::slice>(index).compute(t.size(dim), &start, &stop, &step,
                                                          &length))
      throw py::error_already_set();
    if (step != 1) throw Error("freight.Tensor indexing: slices with a step other than 1");
    Tensor r = t.slice(dim, start, start + length);
    ++dim;
    return r;
  }
  throw Error("freight.Tensor indexing takes integers and slices");
}

Tensor scalar_like(double v, const Tensor& t) {
  return Tensor::scalar(v, t.dtype(), t.device());
}

// The operand of arithmetic with a Python number: Freight's arithmetic is floating-point, so an
// integer tensor computes in float32 (PyTorch promotes the same way for a fractional number or a
// division; for integer results, round the float32 result).
Tensor promoted(const Tensor& t) {
  return is_floating(t.dtype()) ? t : t.to(DType::F32);
}

// A NumPy array over a CPU tensor's memory. Its base owns a handle of the tensor's storage (a
// detached view), not the Python tensor: Module.to() may give that tensor other memory, and the
// array must keep pointing at memory that stays alive.
py::object to_numpy(const Tensor& t) {
  if (!t.device().is_cpu())
    throw Error(
        fmt::format("a tensor on {} has no host memory to share: copy it with "
                    ".to('cpu') first",
                    t.device().str()));
  const char* format = buffer_format(t.dtype());
  const py::ssize_t item = py::ssize_t(dtype_size(t.dtype()));
  std::vector<py::ssize_t> shape(t.shape().begin(), t.shape().end()), strides;
  for (int64_t s : t.strides()) strides.push_back(s * item);
  py::capsule owner(new Tensor(t.detach()), [](void* p) { delete static_cast<Tensor*>(p); });
  return py::array(py::dtype(format), shape, strides, t.data_ptr(), owner);
}

}  // namespace

Device device_arg(const std::string& text) {
  return resolve_device(text);
}

std::vector<int64_t> dims_arg(py::handle dim) {
  if (py::isinstance<py::int_>(dim)) return {dim.cast<int64_t>()};
  return dim.cast<std::vector<int64_t>>();
}

Tensor argmax_arg(const Tensor& x, py::object dim, bool keepdim) {
  if (dim.is_none()) {
    Tensor flat = argmax(reshape(x, {x.numel()}), 0);
    return reshape(flat, keepdim ? Shape(size_t(x.dim()), 1) : Shape{});
  }
  const int64_t d = dim.cast<int64_t>();
  Tensor r = argmax(x, d);
  if (!keepdim) return r;
  Shape s = x.shape();
  s[size_t(d < 0 ? d + x.dim() : d)] = 1;
  return reshape(r, s);
}

DType dtype_arg(py::handle dtype) {
  if (py::isinstance<py::str>(dtype)) return parse_dtype(dtype.cast<std::string>());
  // NumPy dtypes and types (np.float32), torch dtypes (torch.float32): by their name.
  if (py::hasattr(dtype, "name") && !py::hasattr(dtype, "is_floating_point"))
    return parse_dtype(py::str(dtype.attr("name")));
  std::string text = py::str(dtype);  // "torch.float32", "<class 'numpy.float32'>"
  for (const char* name : {"bfloat16", "float32", "float64", "int32", "int64", "uint8"})
    if (text.find(name) != std::string::npos) return parse_dtype(name);
  throw Error(
      fmt::format("'{}' is not a dtype Freight holds (float32, float64, bfloat16, int32, "
                  "int64, uint8)",
                  text));
}

Tensor as_tensor(py::handle obj) {
  if (py::isinstance<Tensor>(obj)) return obj.cast<Tensor>();
  if (PyObject_CheckBuffer(obj.ptr())) return from_buffer(py::reinterpret_borrow<py::buffer>(obj));
  if (py::hasattr(obj, "__dlpack__"))
    return py::module_::import("freight._freight").attr("from_dlpack")(obj).cast<Tensor>();
  return from_values(obj);
}

void bind_tensor(py::module_& m) {
  py::class_<Tensor> t(m, "Tensor", R"doc(
A view of Freight memory on one device, with autograd state, as torch.Tensor.

np.asarray(t) and t.numpy() share a CPU tensor's memory (__array__); freight.from_numpy(a) and
freight.from_dlpack(x) share an array's or a PyTorch tensor's.)doc");
  t.def_property_readonly("shape", [](const Tensor& s) { return py::tuple(py::cast(s.shape())); })
      .def("size", [](const Tensor& s) { return py::tuple(py::cast(s.shape())); })
      .def("size", [](const Tensor& s, int64_t d) { return s.size(d); })
      .def_property_readonly("ndim", &Tensor::dim)
      .def("dim", &Tensor::dim)
      .def("numel", &Tensor::numel)
      .def("__len__",
           [](const Tensor& s) {
             if (s.dim() == 0) throw py::type_error("len() of a 0-d tensor");
             return s.size(0);
           })
      .def_property_readonly("dtype", [](const Tensor& s) { return dtype_name(s.dtype()); })
      .def_property_readonly("device", [](const Tensor& s) { return s.device().str(); })
      .def_property_readonly("is_cuda", [](const Tensor& s) { return s.device().is_cuda(); })
      .def("is_contiguous", &Tensor::is_contiguous)
      .def("data_ptr", [](const Tensor& s) { return reinterpret_cast<uintptr_t>(s.data_ptr()); })
      .def("__repr__", [](const Tensor& s) { return "freight." + s.str(); })
      // ---- copies and views ----
      .def(
          "to",
          [](const Tensor& s, const std::string& where) {
            // A device name or a dtype name: "cuda", "cpu:0"... or "float64", "bf16"...
            bool is_device = where == "auto";
            std::string device_error;
            try {
              if (!is_device) parse_device(where);
              is_device = true;
            } catch (const Error& e) {
              device_error = e.what();
            }
            if (!is_device) {
              DType dtype;
              try {
                dtype = parse_dtype(where);
              } catch (const Error& e) {
                throw Error(fmt::format("Tensor.to('{}'): neither a device ({}) nor a dtype ({})",
                                        where, device_error, e.what()));
              }
              return s.to(dtype);
            }
            py::gil_scoped_release nogil;
            return s.to(resolve_device(where));
          },
          py::arg("device_or_dtype"))
      .def(
          "to", [](const Tensor& s, py::handle dtype) { return s.to(dtype_arg(dtype)); },
          py::arg("dtype"))
      .def("cpu", [](const Tensor& s) { return s.to(Device::cpu()); })
      .def(
          "cuda", [](const Tensor& s, int index) { return s.to(Device::cuda(index)); },
          py::arg("index") = 0)
      .def("numpy", &to_numpy, "A NumPy array sharing this CPU tensor's memory.")
      .def(
          "__array__",
          [](const Tensor& self, py::object dtype, py::object copy) {
            py::object a = to_numpy(self);
            return dtype.is_none() ? a : a.attr("astype")(dtype);
          },
          py::arg("dtype") = py::none(), py::arg("copy") = py::none())
      .def("contiguous", &Tensor::contiguous)
      .def("clone", &Tensor::clone)
      .def("detach", &Tensor::detach)
      .def("copy_",
           [](Tensor& s, py::handle src) {
             s.copy_(as_tensor(src));
             return s;
           })
      .def("fill_",
           [](Tensor& s, double v) {
             s.fill_(v);
             return s;
           })
      .def("zero_",
           [](Tensor& s) {
             s.zero_();
             return s;
           })
      .def("reshape", [](const Tensor& s, const Shape& shape) { return s.reshape(shape); })
      .def("reshape", [](const Tensor& s, py::args dims) { return s.reshape(dims.cast<Shape>()); })
      .def("view", [](const Tensor& s, const Shape& shape) { return s.view(shape); })
      .def("view", [](const Tensor& s, py::args dims) { return s.view(dims.cast<Shape>()); })
      .def("flatten", &Tensor::flatten, py::arg("start_dim") = 0, py::arg("end_dim") = -1)
      .def("transpose", &Tensor::transpose)
      .def("permute", [](const Tensor& s,
                         py::args dims) { return s.permute(dims.cast<std::vector<int64_t>>()); })
      .def_property_readonly("T", [](const Tensor& s) { return s.t(); })
      .def("t", &Tensor::t)
      .def("unsqueeze", &Tensor::unsqueeze)
      .def("squeeze", &Tensor::squeeze)
      .def("__getitem__",
           [](const Tensor& s, py::handle index) {
             int64_t dim = 0;
             if (!py::isinstance<py::tuple>(index)) return index_one(s, dim, index);
             Tensor r = s;
             for (py::handle i : py::reinterpret_borrow<py::tuple>(index)) r = index_one(r, dim, i);
             return r;
           })
      // ---- values on the host ----
      .def("item", &Tensor::item)
      .def("tolist",
           [](const Tensor& self) {
             Tensor s = self.device().is_cpu() ? self : self.to(Device::cpu());
             return to_numpy(s).attr("tolist")();
           })
      // ---- autograd ----
      .def_property("requires_grad", &Tensor::requires_grad,
                    [](Tensor& s, bool on) { s.set_requires_grad(on); })
      .def(
          "requires_grad_", [](Tensor& s, bool on) { return s.set_requires_grad(on); },
          py::arg("requires_grad") = true)
      .def_property(
          "grad",
          [](const Tensor& s) -> py::object {
            Tensor g = s.grad();
            return g.defined() ? py::cast(g) : py::none();
          },
          [](const Tensor& s, py::object g) { s.set_grad(g.is_none() ? Tensor() : as_tensor(g)); })
      .def_property_readonly("is_leaf", &Tensor::is_leaf)
      .def_property_readonly("grad_fn",
                             [](const Tensor& s) -> py::object {
                               if (s.is_leaf()) return py::none();
                               return py::str(grad_fn_name(s));
                             })
      .def(
          "backward",
          [](const Tensor& s, py::object grad, bool retain_graph) {
            Tensor g = grad.is_none() ? Tensor() : as_tensor(grad);
            py::gil_scoped_release nogil;
            s.backward(g, retain_graph);
          },
          py::arg("gradient") = py::none(), py::arg("retain_graph") = false)
      // ---- arithmetic (broadcasting; a Python number is a scalar of the tensor's dtype) ----
      .def("__add__", [](const Tensor& a, const Tensor& b) { return add(a, b); })
      .def("__add__", [](const Tensor& a, double b) { return add_scalar(promoted(a), b); })
      .def("__radd__", [](const Tensor& a, double b) { return add_scalar(promoted(a), b); })
      .def("__sub__", [](const Tensor& a, const Tensor& b) { return sub(a, b); })
      .def("__sub__", [](const Tensor& a, double b) { return add_scalar(promoted(a), -b); })
      .def("__rsub__", [](const Tensor& a, double b) { return add_scalar(neg(promoted(a)), b); })
      .def("__mul__", [](const Tensor& a, const Tensor& b) { return mul(a, b); })
      .def("__mul__", [](const Tensor& a, double b) { return scale(promoted(a), b); })
      .def("__rmul__", [](const Tensor& a, double b) { return scale(promoted(a), b); })
      .def("__truediv__", [](const Tensor& a, const Tensor& b) { return div(a, b); })
      .def("__truediv__",
           [](const Tensor& a, double b) {
             Tensor x = promoted(a);
             return div(x, scalar_like(b, x));
           })
      .def("__rtruediv__",
           [](const Tensor& a, double b) {
             Tensor x = promoted(a);
             return div(scalar_like(b, x), x);
           })
      .def("__neg__", [](const Tensor& a) { return neg(a); })
      .def("__matmul__", [](const Tensor& a, const Tensor& b) { return matmul(a, b); })
      .def(
          "sum",
          [](const Tensor& a, py::object dim, bool keepdim) {
            return dim.is_none() ? sum(a) : sum(a, dims_arg(dim), keepdim);
          },
          py::arg("dim") = py::none(), py::arg("keepdim") = false)
      .def(
          "mean",
          [](const Tensor& a, py::object dim, bool keepdim) {
            return dim.is_none() ? mean(a) : mean(a, dims_arg(dim), keepdim);
          },
          py::arg("dim") = py::none(), py::arg("keepdim") = false)
      .def(
          "argmax",
          [](const Tensor& a, py::object dim, bool keepdim) { return argmax_arg(a, dim, keepdim); },
          py::arg("dim") = py::none(), py::arg("keepdim") = false);

  // ---- creation ----
  m.def(
      "tensor",
      [](py::handle data, py::object dtype, const std::string& device, bool requires_grad) {
        // Always a copy, as torch.tensor: the new tensor owns its memory.
        Tensor src = as_tensor(data);
        Tensor r = src.clone().detach();
        if (!dtype.is_none()) r = r.to(dtype_arg(dtype));
        r = r.to(device_arg(device));
        if (requires_grad) r.set_requires_grad(true);
        return r;
      },
      py::arg("data"), py::arg("dtype") = py::none(), py::arg("device") = "cpu",
      py::arg("requires_grad") = false,
      "A new tensor holding a copy of data (numbers, nested lists, arrays, tensors).");
  m.def(
      "from_numpy", [](py::buffer b) { return from_buffer(b); }, py::arg("array"),
      "A CPU tensor that shares the array's memory (writes through either are seen by both).");
  m.def(
      "as_tensor", [](py::handle obj) { return as_tensor(obj); }, py::arg("data"),
      "A tensor sharing data's memory where it can (arrays, DLPack), else a copy.");
  auto factory = [&m](const char* name, auto fn, const char* doc) {
    m.def(
        name,
        [fn](py::handle shape, py::handle dtype, const std::string& device, bool requires_grad) {
          Tensor r = fn(shape_arg(shape), dtype.is_none() ? DType::F32 : dtype_arg(dtype),
                        device_arg(device));
          if (requires_grad) r.set_requires_grad(true);
          return r;
        },
        py::arg("shape"), py::arg("dtype") = py::none(), py::arg("device") = "cpu",
        py::arg("requires_grad") = false, doc);
  };
  factory(
      "zeros", [](const Shape& s, DType t, Device d) { return Tensor::zeros(s, t, d); },
      "A tensor of zeros.");
  factory(
      "ones", [](const Shape& s, DType t, Device d) { return Tensor::ones(s, t, d); },
      "A tensor of ones.");
  factory(
      "empty", [](const Shape& s, DType t, Device d) { return Tensor::empty(s, t, d); },
      "A tensor with unset values.");
  factory(
      "randn", [](const Shape& s, DType t, Device d) { return Tensor::normal(s, 0, 1, t, d); },
      "Standard normal values from the default generator (freight.manual_seed).");
  factory(
      "rand", [](const Shape& s, DType t, Device d) { return Tensor::uniform(s, 0, 1, t, d); },
      "Uniform values in [0, 1) from the default generator.");
  m.def(
      "full",
      [](py::handle shape, double value, py::handle dtype, const std::string& device) {
        return Tensor::full(shape_arg(shape), value,
                            dtype.is_none() ? DType::F32 : dtype_arg(dtype), device_arg(device));
      },
      py::arg("shape"), py::arg("fill_value"), py::arg("dtype") = py::none(),
      py::arg("device") = "cpu");
  m.def(
      "randint",
      [](int64_t low, int64_t high, py::handle shape, const std::string& device) {
        return Tensor::randint(shape_arg(shape), low, high, device_arg(device));
      },
      py::arg("low"), py::arg("high"), py::arg("shape"), py::arg("device") = "cpu",
      "int64 values in [low, high) from the default generator.");
  m.def("manual_seed", &manual_seed, py::arg("seed"),
        "Seeds the default generator (initialisation, dropout, shuffling, random tensors).");
}

}  // namespace freight::python
