// The Python module `freight._freight`: the C++ engine behind the `freight` package
// (python/freight/__init__.py re-exports it with the Python-side helpers).
#include "bindings.h"
#include "freight/error.h"

namespace freight::python {

PYBIND11_MODULE(_freight, m) {
  m.doc() = "Freight: the C++ training engine, from Python";
  // Freight's errors become freight.Error, a RuntimeError, with Freight's message.
  py::register_exception<freight::Error>(m, "Error", PyExc_RuntimeError);
  bind_tensor(m);
  bind_ops(m);
  bind_dlpack(m);
  py::module_ nn = m.def_submodule("nn", "Modules, layers and models");
  bind_nn(nn);
  py::module_ optim = m.def_submodule("optim", "Optimizers and learning-rate schedules");
  bind_optim(optim);
  py::module_ data = m.def_submodule("data", "Datasets and the Loader");
  bind_data(data);
  bind_training(m);
}

}  // namespace freight::python
