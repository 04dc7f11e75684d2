// freight.optim: SGD, Adam and AdamW with torch.optim's constructors and update rules, and the
// learning-rate schedules StepLR, CosineAnnealingLR and OneCycleLR (stepped once per batch or per
// epoch, as the user's loop decides, like torch.optim.lr_scheduler).
#include "bindings.h"
#include "freight/error.h"
#include "freight/optim/optim.h"

namespace freight::python {

namespace {

// Parameters from a list, a generator (model.parameters()) or any iterable of tensors.
std::vector<Tensor> params_arg(py::handle params) {
  std::vector<Tensor> out;
  for (py::handle p : params) out.push_back(p.cast<Tensor>());
  return out;
}

}  // namespace

void bind_optim(py::module_& m) {
  using namespace optim;
  py::class_<Optimizer>(m, "Optimizer")
      .def(
          "step",
          [](Optimizer& o) {
            py::gil_scoped_release nogil;
            o.step();
          },
          "One update of every parameter that has a gradient.")
      .def("zero_grad", &Optimizer::zero_grad, "Drops every parameter's gradient.")
      .def_property("fused_backward", &Optimizer::fused_backward, &Optimizer::set_fused_backward,
                    "Update SGD's large linear weights inside backward, band by band, as "
                    "freight.train does (off by default; one backward per step, and those "
                    "weights keep no .grad).")
      .def_property("lr", &Optimizer::lr, &Optimizer::set_lr)
      .def_property_readonly("name", &Optimizer::name)
      .def_property_readonly("params", &Optimizer::params)
      .def("state_dict",
           [](const Optimizer& o) {
             py::dict d;
             for (const auto& [k, v] : o.state()) d[py::str(k)] = v;
             return d;
           })
      .def("load_state_dict", [](Optimizer& o, const py::dict& state) {
        NamedTensors s;
        for (auto [k, v] : state) s.emplace_back(k.cast<std::string>(), as_tensor(v));
        o.load_state(s);
      });
  py::class_<SGD, Optimizer>(m, "SGD").def(
      py::init([](py::handle params, double lr, double momentum, double dampening,
                  double weight_decay, bool nesterov) {
        return new SGD(params_arg(params), lr, momentum, dampening, weight_decay, nesterov);
      }),
      py::arg("params"), py::arg("lr"), py::arg("momentum") = 0.0, py::arg("dampening") = 0.0,
      py::arg("weight_decay") = 0.0, py::arg("nesterov") = false);
  py::class_<Adam, Optimizer>(m, "Adam").def(
      py::init([](py::handle params, double lr, std::pair<double, double> betas, double eps,
                  double weight_decay) {
        return new Adam(params_arg(params), lr, betas, eps, weight_decay);
      }),
      py::arg("params"), py::arg("lr") = 1e-3,
      py::arg("betas") = std::pair<double, double>{0.9, 0.999}, py::arg("eps") = 1e-8,
      py::arg("weight_decay") = 0.0);
  py::class_<AdamW, Adam>(m, "AdamW")
      .def(py::init([](py::handle params, double lr, std::pair<double, double> betas, double eps,
                       double weight_decay) {
             return new AdamW(params_arg(params), lr, betas, eps, weight_decay);
           }),
           py::arg("params"), py::arg("lr") = 1e-3,
           py::arg("betas") = std::pair<double, double>{0.9, 0.999}, py::arg("eps") = 1e-8,
           py::arg("weight_decay") = 1e-2);

  py::class_<LRScheduler>(m, "LRScheduler")
      .def("step", &LRScheduler::step)
      .def_property_readonly("last_step", &LRScheduler::last_step)
      .def("get_last_lr", [](const LRScheduler& s) { return std::vector<double>{s.last_lr()}; });
  // Each schedule keeps its optimizer alive (keep_alive<1, 2>): it writes the optimizer's lr.
  py::class_<StepLR, LRScheduler>(m, "StepLR")
      .def(py::init<Optimizer&, int64_t, double>(), py::arg("optimizer"), py::arg("step_size"),
           py::arg("gamma") = 0.1, py::keep_alive<1, 2>());
  py::class_<CosineAnnealingLR, LRScheduler>(m, "CosineAnnealingLR")
      .def(py::init<Optimizer&, int64_t, double>(), py::arg("optimizer"), py::arg("T_max"),
           py::arg("eta_min") = 0.0, py::keep_alive<1, 2>());
  // The learning rate only: momentum (SGD) and beta1 (Adam) are not cycled, which is
  // torch's cycle_momentum=False. torch's default is True; asking for it is an error rather than
  // a run that silently differs.
  py::class_<OneCycleLR, LRScheduler>(m, "OneCycleLR")
      .def(py::init([](Optimizer& opt, double max_lr, int64_t total_steps, double pct_start,
                       double div_factor, double final_div_factor, bool cycle_momentum) {
             if (cycle_momentum)
               throw Error(
                   "OneCycleLR: cycle_momentum=True (momentum or beta1 cycled between 0.85 and "
                   "0.95, torch's default) is not implemented; Freight's OneCycleLR cycles the "
                   "learning rate only, as torch's with cycle_momentum=False");
             return std::make_unique<OneCycleLR>(opt, max_lr, total_steps, pct_start, div_factor,
                                                 final_div_factor);
           }),
           py::arg("optimizer"), py::arg("max_lr"), py::arg("total_steps"),
           py::arg("pct_start") = 0.3, py::arg("div_factor") = 25.0,
           py::arg("final_div_factor") = 1e4, py::arg("cycle_momentum") = false,
           py::keep_alive<1, 2>());
}

}  // namespace freight::python
