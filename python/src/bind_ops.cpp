// The differentiable functions of freight/ops.h as freight.<name>, and the switch that records
// them for autograd (freight.no_grad in Python is built on set_grad_enabled).
#include "bindings.h"
#include "freight/autograd.h"
#include "freight/error.h"
#include "freight/ops.h"

namespace freight::python {

namespace {

Pair pair_arg(py::handle v) {
  if (py::isinstance<py::int_>(v)) {
    const int64_t x = v.cast<int64_t>();
    return {x, x};
  }
  auto p = v.cast<std::vector<int64_t>>();
  if (p.size() != 2) throw Error("a kernel, stride, padding or dilation is one number or two");
  return {p[0], p[1]};
}

Tensor optional_tensor(py::handle t) {
  return t.is_none() ? Tensor() : as_tensor(t);
}

}  // namespace

void bind_ops(py::module_& m) {
  m.def("grad_enabled", &grad_enabled, "Whether ops record the autograd graph now.");
  m.def("set_grad_enabled", &set_grad_enabled, py::arg("enabled"));
  m.def(
      "backward",
      [](const std::vector<Tensor>& roots, py::object grads, bool retain_graph) {
        std::vector<Tensor> g;
        if (!grads.is_none())
          for (py::handle x : grads) g.push_back(optional_tensor(x));
        py::gil_scoped_release nogil;
        backward(roots, g, retain_graph);
      },
      py::arg("tensors"), py::arg("grad_tensors") = py::none(), py::arg("retain_graph") = false,
      "Backward from several roots at once; each leaf's .grad receives the sum.");

  // Unary math and activations, one per row of freight/unary_ops.h.
#define FREIGHT_BIND_UNARY(E, name, ...) \
  m.def(                                 \
      #name, [](const Tensor& x) { return name(x); }, py::arg("input"));
  FREIGHT_UNARY_OPS(FREIGHT_BIND_UNARY, FREIGHT_BIND_UNARY)
#undef FREIGHT_BIND_UNARY

  m.def("add", [](py::handle a, py::handle b) { return add(as_tensor(a), as_tensor(b)); });
  m.def("sub", [](py::handle a, py::handle b) { return sub(as_tensor(a), as_tensor(b)); });
  m.def("mul", [](py::handle a, py::handle b) { return mul(as_tensor(a), as_tensor(b)); });
  m.def("div", [](py::handle a, py::handle b) { return div(as_tensor(a), as_tensor(b)); });
  m.def("matmul", [](const Tensor& a, const Tensor& b) { return matmul(a, b); });
  m.def("softmax", &softmax, py::arg("input"), py::arg("dim") = -1);
  m.def("log_softmax", &log_softmax, py::arg("input"), py::arg("dim") = -1);
  m.def(
      "linear",
      [](const Tensor& x, const Tensor& w, py::handle b) {
        return linear(x, w, optional_tensor(b));
      },
      py::arg("input"), py::arg("weight"), py::arg("bias") = py::none());
  m.def(
      "conv2d",
      [](const Tensor& x, const Tensor& w, py::handle b, py::handle stride, py::handle padding,
         py::handle dilation) {
        return conv2d(x, w, optional_tensor(b), pair_arg(stride), pair_arg(padding),
                      pair_arg(dilation));
      },
      py::arg("input"), py::arg("weight"), py::arg("bias") = py::none(), py::arg("stride") = 1,
      py::arg("padding") = 0, py::arg("dilation") = 1);
  m.def(
      "max_pool2d",
      [](const Tensor& x, py::handle k, py::handle stride, py::handle padding) {
        return max_pool2d(x, pair_arg(k), stride.is_none() ? Pair{0, 0} : pair_arg(stride),
                          pair_arg(padding));
      },
      py::arg("input"), py::arg("kernel_size"), py::arg("stride") = py::none(),
      py::arg("padding") = 0);
  m.def(
      "avg_pool2d",
      [](const Tensor& x, py::handle k, py::handle stride, py::handle padding) {
        return avg_pool2d(x, pair_arg(k), stride.is_none() ? Pair{0, 0} : pair_arg(stride),
                          pair_arg(padding));
      },
      py::arg("input"), py::arg("kernel_size"), py::arg("stride") = py::none(),
      py::arg("padding") = 0);
  m.def("cross_entropy", &cross_entropy, py::arg("input"), py::arg("target"),
        "Mean cross-entropy of logits [N, C] against int64 labels [N].");
  m.def("mse_loss", &mse_loss, py::arg("input"), py::arg("target"));
  m.def(
      "dropout", [](const Tensor& x, double p, bool training) { return dropout(x, p, training); },
      py::arg("input"), py::arg("p") = 0.5, py::arg("training") = true);
  m.def("embedding", &embedding, py::arg("input"), py::arg("weight"));
  m.def(
      "sum",
      [](const Tensor& x, py::object dim, bool keepdim) {
        return dim.is_none() ? sum(x) : sum(x, dims_arg(dim), keepdim);
      },
      py::arg("input"), py::arg("dim") = py::none(), py::arg("keepdim") = false);
  m.def(
      "mean",
      [](const Tensor& x, py::object dim, bool keepdim) {
        return dim.is_none() ? mean(x) : mean(x, dims_arg(dim), keepdim);
      },
      py::arg("input"), py::arg("dim") = py::none(), py::arg("keepdim") = false);
  m.def("argmax", &argmax_arg, py::arg("input"), py::arg("dim") = py::none(),
        py::arg("keepdim") = false);
  m.def("cat", &cat, py::arg("tensors"), py::arg("dim") = 0);
  m.def("stack", &stack, py::arg("tensors"), py::arg("dim") = 0);
  // torch.flatten's defaults (the whole tensor), not nn.Flatten's (after the batch dimension).
  m.def("flatten", &flatten, py::arg("input"), py::arg("start_dim") = 0, py::arg("end_dim") = -1);
}

}  // namespace freight::python
