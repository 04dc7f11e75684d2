// The differentiable functions of freight/ops.h as freight.<name>, and the switch that records
// them for autograd (freight.no_grad in Python is built on set_grad_enabled).
#include <fmt/format.h>

#include <algorithm>

#include "bindings.h"
#include "freight/autograd.h"
#include "freight/error.h"
#include "freight/ops.h"

namespace freight::python {

namespace {

// torch.nn.functional.cross_entropy's arguments. Without any of them (and no label equal to
// ignore_index) the fused op runs. Otherwise the loss is composed of differentiable ops from
// log_softmax: per sample n with label y_n, class weights w (1 without) and m_n = 0 where
// y_n is ignore_index,
//   loss_n = m_n·[(1 − ε)·w_{y_n}·(−log p_{n,y_n}) + (ε/C)·Σ_c w_c·(−log p_{n,c})]
// and 'mean' divides the sum by Σ_n m_n·w_{y_n}, as torch does (NaN when every label is
// ignored, as there).
Tensor cross_entropy_arg(const Tensor& x, const Tensor& y, py::object weight, int64_t ignore_index,
                         const std::string& reduction, double label_smoothing) {
  FREIGHT_CHECK(
      reduction == "mean" || reduction == "sum" || reduction == "none",
      fmt::format("cross_entropy: reduction '{}' is not 'mean', 'sum' or 'none'", reduction));
  FREIGHT_CHECK(
      label_smoothing >= 0 && label_smoothing <= 1,
      fmt::format("cross_entropy: label_smoothing must lie in [0, 1], got {}", label_smoothing));
  const bool plain = weight.is_none() && reduction == "mean" && label_smoothing == 0;
  FREIGHT_CHECK(
      x.dim() == 2 && y.dim() == 1 && y.dtype() == DType::I64 && x.shape()[0] == y.shape()[0],
      fmt::format("cross_entropy: expects logits [N, C] and int64 labels [N], got {} "
                  "and {} {}",
                  shape_str(x.shape()), dtype_name(y.dtype()), shape_str(y.shape())));
  const std::vector<int64_t> labels = y.to_int_vector();
  const bool any_ignored = std::find(labels.begin(), labels.end(), ignore_index) != labels.end();
  if (plain && !any_ignored) return cross_entropy(x, y);
  const int64_t n = x.shape()[0], c = x.shape()[1];
  std::vector<double> w(size_t(c), 1.0);
  if (!weight.is_none()) {
    Tensor wt = as_tensor(weight);
    FREIGHT_CHECK(
        wt.dim() == 1 && wt.shape()[0] == c,
        fmt::format("cross_entropy: weight must be [C] = [{}], got {}", c, shape_str(wt.shape())));
    w = wt.to_double_vector();
  }
  std::vector<double> on_label(size_t(n * c), 0.0), spread(size_t(n * c), 0.0);
  double denominator = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t label = labels[size_t(i)];
    if (label == ignore_index) continue;
    FREIGHT_CHECK(label >= 0 && label < c,
                  fmt::format("cross_entropy: label {} at position {} is out of range for {} "
                              "classes",
                              label, i, c));
    on_label[size_t(i * c + label)] = (1 - label_smoothing) * w[size_t(label)];
    for (int64_t k = 0; k < c; ++k)
      spread[size_t(i * c + k)] = label_smoothing / double(c) * w[size_t(k)];
    denominator += w[size_t(label)];
  }
  auto constant = [&](const std::vector<double>& v) {
    return Tensor::from_vector(v, {n, c}).to(x.dtype()).to(x.device());
  };
  Tensor coef =
      label_smoothing > 0 ? add(constant(on_label), constant(spread)) : constant(on_label);
  Tensor per_sample = neg(sum(mul(log_softmax(x, 1), coef), {1}));
  if (reduction == "none") return per_sample;
  Tensor total = sum(per_sample);
  return reduction == "sum" ? total : scale(total, 1.0 / denominator);
}

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
  m.def("cross_entropy", &cross_entropy_arg, py::arg("input"), py::arg("target"),
        py::arg("weight") = py::none(), py::arg("ignore_index") = -100,
        py::arg("reduction") = "mean", py::arg("label_smoothing") = 0.0,
        "Cross-entropy of logits [N, C] against int64 labels [N], with torch's weight, "
        "ignore_index, reduction and label_smoothing.");
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
