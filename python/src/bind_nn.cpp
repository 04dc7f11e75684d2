// freight.nn: Module (PyTorch's ergonomics: call, parameters, state_dict, train/eval, to), the
// layers of the model-file format with PyTorch's constructors, and models built from a zoo name,
// a model file or a dict in the model-file format (docs/model-format.md).
#include <fmt/format.h>

#include "bindings.h"
#include "freight/error.h"
#include "freight/nn/container.h"
#include "freight/nn/layers.h"
#include "freight/nn/lstm.h"
#include "freight/nn/model_file.h"
#include "freight/nn/module.h"

namespace freight::python {

namespace {

using nn::Module;
using nn::ModulePtr;

nn::Size2 size2(py::handle v) {
  if (py::isinstance<py::int_>(v)) return nn::Size2(v.cast<int64_t>());
  std::vector<int64_t> p;
  try {
    p = v.cast<std::vector<int64_t>>();
  } catch (const py::cast_error&) {
    throw Error(
        fmt::format("a kernel size, stride, padding or dilation is one integer or two, "
                    "got {}",
                    std::string(py::repr(v))));
  }
  if (p.size() != 2) throw Error("a kernel size, stride, padding or dilation is one number or two");
  return nn::Size2(p[0], p[1]);
}

// Conv2d's padding: a size, or torch's strings: "valid" (none) and "same" (the output as large
// as the input: stride 1, and per side dilation·(k − 1) / 2, which must be whole: torch pads an
// even extent unevenly, which Freight's symmetric padding cannot).
nn::Size2 conv_padding(py::handle padding, nn::Size2 k, nn::Size2 stride, nn::Size2 dilation) {
  if (!py::isinstance<py::str>(padding)) return size2(padding);
  const std::string mode = padding.cast<std::string>();
  if (mode == "valid") return nn::Size2(0);
  if (mode != "same")
    throw Error(fmt::format("Conv2d: padding '{}' is not 'same', 'valid' or a size", mode));
  if (stride.h != 1 || stride.w != 1)
    throw Error(
        fmt::format("Conv2d: padding='same' needs stride 1 (as in torch), got stride "
                    "{}x{}",
                    stride.h, stride.w));
  const int64_t th = dilation.h * (k.h - 1), tw = dilation.w * (k.w - 1);
  if (th % 2 != 0 || tw % 2 != 0)
    throw Error(
        fmt::format("Conv2d: padding='same' with kernel {}x{} and dilation {}x{} needs "
                    "uneven padding, which Freight does not do; use an odd kernel or "
                    "give the padding",
                    k.h, k.w, dilation.h, dilation.w));
  return nn::Size2(th / 2, tw / 2);
}

py::dict named(const nn::NamedTensors& tensors) {
  py::dict d;  // insertion-ordered: state_dict order
  for (const auto& [name, t] : tensors) d[py::str(name)] = t;
  return d;
}

// A state_dict from Python: a dict of name -> tensor, array or PyTorch tensor.
nn::NamedTensors named_arg(const py::dict& d) {
  nn::NamedTensors out;
  for (auto [k, v] : d) {
    Tensor t = as_tensor(v);
    // PyTorch's state_dict values may live on a GPU or be non-contiguous; both convert.
    out.emplace_back(k.cast<std::string>(), t);
  }
  return out;
}

// A spec from a zoo name, a file path, or a dict (its JSON text).
nn::ModelSpec spec_arg(py::handle model) {
  if (py::isinstance<py::str>(model)) return nn::load_model_spec(model.cast<std::string>());
  if (py::isinstance<py::dict>(model)) {
    std::string text = py::module_::import("json").attr("dumps")(model).cast<std::string>();
    return nn::parse_model_spec(text, "the model dict");
  }
  if (py::hasattr(model, "__fspath__"))
    return nn::load_model_spec(py::str(model.attr("__fspath__")()).cast<std::string>());
  throw Error("a model is a zoo name, a model file's path or a dict in the model-file format");
}

}  // namespace

void bind_nn(py::module_& m) {
  py::class_<nn::ModelSpec>(m, "ModelSpec", "What a model file describes (docs/model-format.md).")
      .def_readonly("name", &nn::ModelSpec::name)
      .def_readonly("description", &nn::ModelSpec::description)
      .def_property_readonly(
          "input_shape", [](const nn::ModelSpec& s) { return py::tuple(py::cast(s.input_shape)); })
      .def_property_readonly("input_dtype",
                             [](const nn::ModelSpec& s) { return dtype_name(s.input_dtype); })
      .def_readonly("classes", &nn::ModelSpec::classes)
      .def_readonly("vocab", &nn::ModelSpec::vocab)
      .def_readonly("task", &nn::ModelSpec::task)
      .def_readonly("train_defaults", &nn::ModelSpec::train_defaults)
      .def("to_dict",
           [](const nn::ModelSpec& s) {
             return py::module_::import("json").attr("loads")(nn::model_spec_json(s));
           })
      .def("__repr__", [](const nn::ModelSpec& s) {
        return fmt::format("freight.nn.ModelSpec('{}', input {}, {} classes)", s.name,
                           shape_str(s.input_shape), s.classes);
      });

  py::class_<Module, ModulePtr>(m, "Module", py::dynamic_attr(), R"doc(
The base of every layer and network, as torch.nn.Module: call it on a batch, list its
parameters, move it, switch train/eval, save and load its state_dict (PyTorch's names).)doc")
      .def(
          "__call__",
          [](Module& self, py::handle x) {
            Tensor in = as_tensor(x);
            py::gil_scoped_release nogil;
            return self(in);
          },
          py::arg("input"))
      .def("forward",
           [](Module& self, py::handle x) {
             Tensor in = as_tensor(x);
             py::gil_scoped_release nogil;
             return self(in);
           })
      .def("parameters", &Module::parameters)
      .def("named_parameters", [](const Module& s) { return named(s.named_parameters()); })
      .def("buffers",
           [](const Module& s) {
             std::vector<Tensor> b;
             for (auto& [n, t] : s.named_buffers()) b.push_back(t);
             return b;
           })
      .def("named_buffers", [](const Module& s) { return named(s.named_buffers()); })
      .def("children",
           [](const Module& s) {
             std::vector<ModulePtr> c;
             for (auto& [n, mod] : s.named_children()) c.push_back(mod);
             return c;
           })
      .def("named_children",
           [](const Module& s) {
             py::dict d;
             for (auto& [n, mod] : s.named_children()) d[py::str(n)] = mod;
             return d;
           })
      .def("num_parameters", &Module::num_parameters)
      .def(
          "state_dict", [](const Module& s) { return named(s.state_dict()); },
          "Parameters and buffers by PyTorch's names, sharing memory with the module.")
      .def(
          "load_state_dict",
          [](Module& s, const py::dict& state) { s.load_state_dict(named_arg(state)); },
          py::arg("state_dict"),
          "Copies every entry in (strict: missing, unexpected or misshapen keys are an error "
          "listing each, and nothing is copied). Values may be freight tensors, NumPy arrays or "
          "PyTorch tensors.")
      .def(
          "train",
          [](Module& s, bool on) -> Module& {
            s.train(on);
            return s;
          },
          py::arg("mode") = true, py::return_value_policy::reference)
      .def(
          "eval",
          [](Module& s) -> Module& {
            s.eval();
            return s;
          },
          py::return_value_policy::reference)
      .def_property_readonly("training", &Module::is_training)
      .def(
          "to",
          [](Module& s, const std::string& where) -> Module& {
            try {
              s.to(parse_dtype(where));
            } catch (const Error&) {
              Device d = device_arg(where);
              py::gil_scoped_release nogil;
              s.to(d);
            }
            return s;
          },
          py::arg("device_or_dtype"), py::return_value_policy::reference)
      .def("zero_grad", &Module::zero_grad)
      .def(
          "output_shape",
          [](const Module& s, const Shape& in) { return py::tuple(py::cast(s.output_shape(in))); },
          py::arg("input_shape"), "The output shape for an input of this shape (batch first).")
      .def("flops", &Module::flops, py::arg("input_shape"),
           "Forward FLOPs for an input of this shape (a multiply-add counts 2).")
      .def_property_readonly("type_name", &Module::type_name)
      .def("describe", &Module::describe)
      .def("__repr__", &Module::to_string);

  py::class_<nn::Linear, Module, std::shared_ptr<nn::Linear>>(m, "Linear")
      .def(py::init<int64_t, int64_t, bool>(), py::arg("in_features"), py::arg("out_features"),
           py::arg("bias") = true);
  py::class_<nn::Conv2d, Module, std::shared_ptr<nn::Conv2d>>(m, "Conv2d")
      .def(py::init([](int64_t in, int64_t out, py::handle k, py::handle stride, py::handle padding,
                       py::handle dilation, bool bias) {
             const nn::Size2 ks = size2(k), st = size2(stride), dil = size2(dilation);
             return std::make_shared<nn::Conv2d>(in, out, ks, st,
                                                 conv_padding(padding, ks, st, dil), dil, bias);
           }),
           py::arg("in_channels"), py::arg("out_channels"), py::arg("kernel_size"),
           py::arg("stride") = 1, py::arg("padding") = 0, py::arg("dilation") = 1,
           py::arg("bias") = true);
  py::class_<nn::MaxPool2d, Module, std::shared_ptr<nn::MaxPool2d>>(m, "MaxPool2d")
      .def(py::init([](py::handle k, py::handle stride, py::handle padding) {
             return std::make_shared<nn::MaxPool2d>(
                 size2(k), stride.is_none() ? nn::Size2(0) : size2(stride), size2(padding));
           }),
           py::arg("kernel_size"), py::arg("stride") = py::none(), py::arg("padding") = 0);
  py::class_<nn::AvgPool2d, Module, std::shared_ptr<nn::AvgPool2d>>(m, "AvgPool2d")
      .def(py::init([](py::handle k, py::handle stride, py::handle padding) {
             return std::make_shared<nn::AvgPool2d>(
                 size2(k), stride.is_none() ? nn::Size2(0) : size2(stride), size2(padding));
           }),
           py::arg("kernel_size"), py::arg("stride") = py::none(), py::arg("padding") = 0);
  py::class_<nn::BatchNorm1d, Module, std::shared_ptr<nn::BatchNorm1d>>(m, "BatchNorm1d")
      .def(py::init<int64_t, double, double>(), py::arg("num_features"), py::arg("eps") = 1e-5,
           py::arg("momentum") = 0.1);
  py::class_<nn::BatchNorm2d, Module, std::shared_ptr<nn::BatchNorm2d>>(m, "BatchNorm2d")
      .def(py::init<int64_t, double, double>(), py::arg("num_features"), py::arg("eps") = 1e-5,
           py::arg("momentum") = 0.1);
  py::class_<nn::Dropout, Module, std::shared_ptr<nn::Dropout>>(m, "Dropout")
      .def(py::init<double>(), py::arg("p") = 0.5);
#define FREIGHT_BIND_NO_LAYER(...)
#define FREIGHT_BIND_ACTIVATION(E, n, S, b, Layer) \
  py::class_<nn::Layer, Module, std::shared_ptr<nn::Layer>>(m, #Layer).def(py::init<>());
  FREIGHT_UNARY_OPS(FREIGHT_BIND_NO_LAYER, FREIGHT_BIND_ACTIVATION)
#undef FREIGHT_BIND_ACTIVATION
#undef FREIGHT_BIND_NO_LAYER
  py::class_<nn::Flatten, Module, std::shared_ptr<nn::Flatten>>(m, "Flatten")
      .def(py::init<int64_t, int64_t>(), py::arg("start_dim") = 1, py::arg("end_dim") = -1);
  py::class_<nn::Reshape, Module, std::shared_ptr<nn::Reshape>>(m, "Reshape")
      .def(py::init<Shape>(), py::arg("shape"));
  py::class_<nn::Embedding, Module, std::shared_ptr<nn::Embedding>>(m, "Embedding")
      .def(py::init<int64_t, int64_t>(), py::arg("num_embeddings"), py::arg("embedding_dim"));
  py::class_<nn::LSTM, Module, std::shared_ptr<nn::LSTM>>(m, "LSTM").def(
      py::init<int64_t, int64_t, int64_t>(), py::arg("input_size"), py::arg("hidden_size"),
      py::arg("num_layers") = 1);
  py::class_<nn::LastStep, Module, std::shared_ptr<nn::LastStep>>(m, "LastStep").def(py::init<>());
  py::class_<nn::Sequential, Module, std::shared_ptr<nn::Sequential>>(m, "Sequential")
      .def(py::init([](py::args modules) {
        auto s = std::make_shared<nn::Sequential>();
        for (py::handle mod : modules) s->push_back(mod.cast<ModulePtr>());
        return s;
      }))
      .def(
          "append",
          [](nn::Sequential& s, ModulePtr mod) -> nn::Sequential& { return s.push_back(mod); },
          py::return_value_policy::reference)
      .def("__len__", &nn::Sequential::size)
      .def("__getitem__", [](const nn::Sequential& s, int64_t i) {
        const int64_t n = int64_t(s.size());
        if (i < -n || i >= n) throw py::index_error(fmt::format("index {} of {} layers", i, n));
        return s[size_t(i < 0 ? i + n : i)];
      });
  py::class_<nn::Residual, Module, std::shared_ptr<nn::Residual>>(m, "Residual")
      .def(py::init<ModulePtr, ModulePtr>(), py::arg("body"), py::arg("shortcut") = nullptr);

  m.def("load_spec", &spec_arg, py::arg("model"),
        "The spec of a zoo name, a model file's path or a dict in the model-file format.");
  m.def(
      "build",
      [](py::handle model) {
        nn::ModelSpec spec = spec_arg(model);
        nn::measure_model(spec);  // limits and shapes checked before any weight is made
        ModulePtr module = nn::build_model(spec);
        py::object obj = py::cast(module);
        obj.attr("spec") = spec;
        return obj;
      },
      py::arg("model"),
      "A freshly initialised network from a zoo name ('mlp'), a model file or a dict; its .spec "
      "says what it was built from (freight.save keeps it, so `freight eval` can rebuild it).");
  m.def("zoo", &nn::zoo_models, "The names of the zoo's models.");
}

}  // namespace freight::python
