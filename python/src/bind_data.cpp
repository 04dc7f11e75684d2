// freight.data: datasets by name (as `freight train --data` reads them) and the Loader that
// `freight train` batches them with (seeded shuffling, normalisation, a prefetching thread), so a
// training loop written in Python sees exactly the batches the command's would.
#include <fmt/format.h>

#include "bindings.h"
#include "freight/data/loader.h"
#include "freight/error.h"
#include "freight/training.h"

namespace freight::python {

namespace {

// One epoch of a Loader as a Python iterator of (inputs, labels).
struct EpochIterator {
  std::shared_ptr<data::Loader> loader;
  py::tuple next() {
    data::Batch b;
    bool more;
    {
      py::gil_scoped_release nogil;
      more = loader->next(b);
    }
    if (!more) throw py::stop_iteration();
    return py::make_tuple(b.inputs, b.labels);
  }
};

}  // namespace

void bind_data(py::module_& m) {
  py::class_<data::Dataset>(m, "Dataset", "Samples held in memory: inputs [N, ...], labels [N].")
      .def_readonly("name", &data::Dataset::name)
      .def_readonly("inputs", &data::Dataset::inputs)
      .def_readonly("labels", &data::Dataset::labels)
      .def_readonly("num_classes", &data::Dataset::num_classes)
      .def("__len__", &data::Dataset::size)
      .def("slice", &data::Dataset::slice, py::arg("begin"), py::arg("end"))
      .def("__repr__", [](const data::Dataset& d) {
        return fmt::format("freight.data.Dataset('{}', {} samples of shape {}, {} classes)", d.name,
                           d.size(), shape_str(d.sample_shape()), d.num_classes);
      });
  m.def(
      "load",
      [](const std::string& name, const std::string& split, const nn::ModelSpec& spec) {
        py::gil_scoped_release nogil;
        return load_dataset(name, split, spec);
      },
      py::arg("name"), py::arg("split"), py::arg("spec"),
      "A dataset split ('train' or 'test') as `freight train --data NAME` loads it for a model "
      "of this spec (synthetic data takes the spec's input shape).");
  m.def(
      "normalisation",
      [](const std::string& name) {
        auto [mean, std] = dataset_normalisation(name);
        return py::make_tuple(mean, std);
      },
      py::arg("name"), "(mean, std) the command normalises this dataset's inputs with.");
  m.def(
      "arrays",
      [](const Tensor& inputs, const Tensor& labels, int64_t num_classes) {
        // The Loader's thread reads samples through host pointers.
        FREIGHT_CHECK(inputs.device().is_cpu() && labels.device().is_cpu(),
                      fmt::format("freight.data.arrays: inputs on {} and labels on {}: a dataset "
                                  "lives on the CPU (the Loader moves batches to its device)",
                                  inputs.device().str(), labels.device().str()));
        data::Dataset d;
        d.name = "arrays";
        d.inputs = inputs;
        d.labels = labels;
        d.num_classes = num_classes;
        FREIGHT_CHECK(labels.dim() >= 1 && inputs.dim() >= 1 && inputs.size(0) == labels.size(0),
                      fmt::format("freight.data.arrays: inputs {} and labels {} hold different "
                                  "numbers of samples",
                                  shape_str(inputs.shape()), shape_str(labels.shape())));
        return d;
      },
      py::arg("inputs"), py::arg("labels"), py::arg("num_classes"),
      "A dataset of tensors in memory (inputs [N, ...], int64 labels [N]).");

  py::class_<EpochIterator>(m, "_EpochIterator")
      .def("__iter__", [](EpochIterator& it) -> EpochIterator& { return it; })
      .def("__next__", &EpochIterator::next);
  py::class_<data::Loader, std::shared_ptr<data::Loader>>(m, "Loader", R"doc(
Batches of a dataset as `freight train` makes them: the order of epoch e is a pure function of
(seed, e), uint8 pixels become (x / 255 - mean) / std, and a thread prepares batches ahead.
  for x, y in loader.epoch(e): ...)doc")
      .def(py::init([](const data::Dataset& d, int64_t batch_size, bool shuffle, uint64_t seed,
                       double mean, double std, bool drop_last, const std::string& device,
                       int prefetch) {
             data::LoaderOptions o;
             o.batch_size = batch_size;
             o.shuffle = shuffle;
             o.seed = seed;
             o.mean = mean;
             o.std = std;
             o.drop_last = drop_last;
             o.device = device_arg(device);
             o.prefetch = prefetch;
             return std::make_shared<data::Loader>(d, o);
           }),
           py::arg("dataset"), py::arg("batch_size") = 64, py::arg("shuffle") = true,
           py::arg("seed") = 0, py::arg("mean") = 0.0, py::arg("std") = 1.0,
           py::arg("drop_last") = false, py::arg("device") = "cpu", py::arg("prefetch") = 2,
           py::keep_alive<1, 2>())
      .def(
          "epoch",
          [](std::shared_ptr<data::Loader> self, int64_t epoch) {
            {
              py::gil_scoped_release nogil;
              self->start_epoch(epoch);
            }
            return EpochIterator{self};
          },
          py::arg("epoch") = 0, "The batches of epoch `epoch` (0-based), as (inputs, labels).")
      .def("__len__", &data::Loader::num_batches)
      .def_property_readonly("num_samples", &data::Loader::num_samples);
}

}  // namespace freight::python
