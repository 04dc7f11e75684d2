// The command's verbs as functions returning Python objects: train (per-epoch metrics, the
// trained model), evaluate, explain (the rows of the breakdown), plan; checkpoints (save, load,
// safetensors files). python/freight/__init__.py wraps train with the progress bar and keyword
// arguments.
//
// The GIL is released while training, evaluating, explaining and planning run; the callbacks
// take it back for the Python code they call. Ctrl-C: Python's SIGINT handler only sets a flag
// while C++ runs, so the per-batch callback checks for it (PyErr_CheckSignals) and asks the run
// to stop; the run finishes the step under way, saves a checkpoint that resumes there (when it
// has a save path) and returns with `interrupted` set, as `freight train` does.
#include <fmt/format.h>

#include <atomic>
#include <cmath>

#include "bindings.h"
#include "freight/device.h"
#include "freight/error.h"
#include "freight/explain.h"
#include "freight/io/safetensors.h"
#include "freight/plan.h"
#include "freight/runtime.h"
#include "freight/training.h"

namespace freight::python {

namespace {

// ---- options from keyword arguments ----

// Sets fields of an options struct from a dict, one setter per key; an unknown key is a
// TypeError that lists the known ones (a misspelt option must not be silently ignored).
template <class Options>
class OptionTable {
 public:
  using Setter = std::function<void(Options&, py::handle, const char* key)>;
  OptionTable& add(const char* key, Setter set) {
    keys_.emplace_back(key, std::move(set));
    return *this;
  }
  Options parse(const py::dict& kwargs, const char* function) const {
    Options o;
    for (auto [k, v] : kwargs) {
      const std::string key = py::cast<std::string>(k);
      bool found = false;
      for (const auto& [name, set] : keys_)
        if (key == name) {
          try {
            if (!v.is_none()) set(o, v, name.c_str());
          } catch (const py::type_error& e) {
            throw py::type_error(fmt::format("{}(): {}", function, e.what()));
          }
          found = true;
        }
      if (!found) {
        std::string known;
        for (const auto& [name, set] : keys_) known += (known.empty() ? "" : ", ") + name;
        throw py::type_error(fmt::format("{}() got an unknown option '{}'; the options are: {}",
                                         function, key, known));
      }
    }
    return o;
  }

 private:
  std::vector<std::pair<std::string, Setter>> keys_;
};

// What an option of C++ type T takes, in Python's words, for the error when a value is not one.
template <class T>
const char* python_kind() {
  if constexpr (std::is_same_v<T, bool>)
    return "True or False";
  else if constexpr (std::is_integral_v<T> && std::is_unsigned_v<T>)
    return "a non-negative int";
  else if constexpr (std::is_integral_v<T>)
    return "an int";
  else if constexpr (std::is_floating_point_v<T>)
    return "a number";
  else
    return "a str";
}

// v as a T, or a TypeError naming the option, the value and what it takes (pybind11's own
// "Unable to cast Python instance to C++ type" names none of them).
template <class T>
T option_value(py::handle v, const char* key) {
  try {
    return v.cast<T>();
  } catch (const py::cast_error&) {
    throw py::type_error(fmt::format(
        "option {}={} ({}) must be {}", key, py::repr(v).cast<std::string>(),
        py::str(py::type::of(v).attr("__name__")).cast<std::string>(), python_kind<T>()));
  }
}

template <class O, class T>
typename OptionTable<O>::Setter field(T O::*member) {
  return [member](O& o, py::handle v, const char* key) { o.*member = option_value<T>(v, key); };
}
template <class O, class T>
typename OptionTable<O>::Setter optional_field(std::optional<T> O::*member) {
  return [member](O& o, py::handle v, const char* key) { o.*member = option_value<T>(v, key); };
}
template <class O>
typename OptionTable<O>::Setter path_field(std::string O::*member) {
  return [member](O& o, py::handle v, const char*) { o.*member = py::str(v).cast<std::string>(); };
}

const OptionTable<TrainOptions>& train_options() {
  static const OptionTable<TrainOptions> table = [] {
    using O = TrainOptions;
    OptionTable<O> t;
    t.add("model", path_field(&O::model))
        .add("data", path_field(&O::data))
        .add("batch_size", optional_field(&O::batch_size))
        .add("test_batch_size", field(&O::test_batch_size))
        .add("epochs", optional_field(&O::epochs))
        .add("lr", optional_field(&O::lr))
        .add("optimizer", field(&O::optimizer))
        .add("momentum", optional_field(&O::momentum))
        .add("weight_decay", optional_field(&O::weight_decay))
        .add("schedule", field(&O::schedule))
        .add("seed", field(&O::seed))
        .add("device", field(&O::device))
        .add("threads", field(&O::threads))
        .add("save", path_field(&O::save))
        .add("resume", path_field(&O::resume))
        .add("log_interval", field(&O::log_interval))
        .add("metrics", path_field(&O::metrics))
        .add("limit_train", field(&O::limit_train))
        .add("limit_test", field(&O::limit_test))
        .add("precision", field(&O::precision))
        .add("cuda_graph", field(&O::cuda_graph))
        .add("data_on_device", field(&O::data_on_device))
        .add("deterministic", field(&O::deterministic))
        .add("accumulate", field(&O::accumulate));
    return t;
  }();
  return table;
}

const OptionTable<ExplainOptions>& explain_options() {
  static const OptionTable<ExplainOptions> table = [] {
    using O = ExplainOptions;
    OptionTable<O> t;
    t.add("model", path_field(&O::model))
        .add("device", field(&O::device))
        .add("batch_size", optional_field(&O::batch_size))
        .add("threads", field(&O::threads))
        .add("warmup", field(&O::warmup))
        .add("min_steps", field(&O::min_steps))
        .add("min_seconds", field(&O::min_seconds))
        .add("max_steps", field(&O::max_steps))
        .add("seed", field(&O::seed))
        .add("data", path_field(&O::data));
    return t;
  }();
  return table;
}

const OptionTable<PlanOptions>& plan_options() {
  static const OptionTable<PlanOptions> table = [] {
    using O = PlanOptions;
    OptionTable<O> t;
    t.add("model", path_field(&O::model))
        .add("samples", field(&O::samples))
        .add("epochs", field(&O::epochs))
        .add("batch_size", optional_field(&O::batch_size))
        .add("optimizer", field(&O::optimizer))
        .add("reference_gpu", field(&O::reference_gpu))
        .add("ranks", field(&O::ranks))
        .add("nodes", field(&O::nodes))
        .add("gpus_per_node", field(&O::gpus_per_node));
    return t;
  }();
  return table;
}

// ---- results as Python objects ----

py::dict epoch_dict(const EpochReport& r) {
  py::dict d;
  d["epoch"] = r.epoch;
  d["step"] = r.step;
  d["lr"] = r.lr;
  d["train_loss"] = r.train_loss;
  d["train_accuracy"] = r.train_accuracy;
  d["test_loss"] = r.test_loss;
  d["test_accuracy"] = r.test_accuracy;
  // A language model's perplexity (exp of the mean cross-entropy per token), as --metrics has it.
  if (r.train_perplexity > 0 || r.test_perplexity > 0) {
    d["train_perplexity"] = r.train_perplexity;
    d["test_perplexity"] = r.test_perplexity;
  }
  d["train_seconds"] = r.train_seconds;
  d["eval_seconds"] = r.eval_seconds;
  d["samples_per_second"] = r.samples_per_second;
  d["peak_memory_bytes"] = r.peak_memory;
  d["graph_steps"] = r.graph_steps;
  return d;
}

py::dict progress_dict(const BatchProgress& p) {
  py::dict d;
  d["epoch"] = p.epoch;
  d["epochs"] = p.epochs;
  d["batch"] = p.batch;
  d["batches"] = p.batches;
  d["loss"] = p.loss;
  d["accuracy"] = p.accuracy;
  d["seconds"] = p.seconds;
  d["samples"] = p.samples;
  return d;
}

py::dict eval_dict(const EvalResult& r) {
  py::dict d;
  d["loss"] = r.loss;
  d["accuracy"] = r.accuracy;
  d["samples"] = r.samples;
  d["seconds"] = r.seconds;
  if (!r.non_finite.empty()) d["non_finite"] = r.non_finite;
  if (r.perplexity > 0) d["perplexity"] = r.perplexity;
  if (!r.class_names.empty()) d["class_names"] = r.class_names;
  if (!r.data_notes.empty()) d["data_notes"] = r.data_notes;
  return d;
}

py::dict peaks_dict(const DevicePeaks& p) {
  py::dict d;
  d["name"] = p.name;
  d["measured_at"] = p.measured_at;
  d["fp32_flops"] = p.fp32_flops;
  d["mem_bandwidth"] = p.mem_bandwidth;
  return d;
}

py::object with_spec(const nn::ModulePtr& model, const nn::ModelSpec& spec) {
  py::object obj = py::cast(model);
  obj.attr("spec") = spec;
  return obj;
}

// A path from a str or an os.PathLike (pathlib.Path).
std::string path_arg(py::handle path) {
  return py::str(py::module_::import("os").attr("fspath")(path)).cast<std::string>();
}

// The Python error a callback raised, kept until the run has stopped.
struct CallbackError {
  std::optional<py::error_already_set> error;
};

}  // namespace

void bind_training(py::module_& m) {
  m.def(
      "_train",
      [](const py::dict& kwargs, py::object on_batch, py::object on_epoch, py::object on_note) {
        TrainOptions options = train_options().parse(kwargs, "freight.train");
        std::atomic<bool> stop{false};
        bool keyboard_interrupt = false;
        CallbackError failed;
        // Runs Python code from a callback: any exception it raises stops the run and is raised
        // again once train() has returned.
        auto call_python = [&](const std::function<void()>& fn) {
          py::gil_scoped_acquire gil;
          if (failed.error || keyboard_interrupt) return;
          try {
            fn();
          } catch (py::error_already_set& e) {
            // Ctrl-C lands in whichever Python code runs when it comes, often a callback's.
            if (e.matches(PyExc_KeyboardInterrupt))
              keyboard_interrupt = true;
            else
              failed.error = std::move(e);
            stop = true;
          }
        };
        TrainCallbacks cb;
        cb.stop = &stop;
        cb.note = [&](const std::string& text) {
          call_python([&] {
            if (!on_note.is_none()) on_note(text);
          });
        };
        cb.on_batch = [&](const BatchProgress& p) {
          py::gil_scoped_acquire gil;
          if (!keyboard_interrupt && PyErr_CheckSignals() != 0) {
            // A handler raised (Ctrl-C's KeyboardInterrupt): stop at the end of this step.
            if (PyErr_ExceptionMatches(PyExc_KeyboardInterrupt)) {
              PyErr_Clear();
              keyboard_interrupt = true;
              stop = true;
            } else {
              failed.error = py::error_already_set();
              stop = true;
            }
            return;
          }
          if (!on_batch.is_none()) call_python([&] { on_batch(progress_dict(p)); });
        };
        cb.on_epoch = [&](const EpochReport& r) {
          if (!on_epoch.is_none()) call_python([&] { on_epoch(epoch_dict(r)); });
        };
        TrainResult result;
        {
          py::gil_scoped_release nogil;
          result = train(options, cb);
        }
        if (failed.error) throw std::move(*failed.error);
        py::dict d;
        py::list epochs;
        for (const EpochReport& r : result.epochs) epochs.append(epoch_dict(r));
        d["epochs"] = epochs;
        d["model"] = with_spec(result.model, result.spec);
        d["spec"] = result.spec;
        d["device"] = result.device.str();
        d["wall_seconds"] = result.wall_seconds;
        d["checkpoint"] = result.checkpoint.empty() ? py::object(py::none())
                                                    : py::object(py::str(result.checkpoint));
        d["interrupted"] = result.interrupted;
        d["keyboard_interrupt"] = keyboard_interrupt;
        d["stopped_epoch"] = result.stopped_epoch;
        d["stopped_batch"] = result.stopped_batch;
        d["batches_per_epoch"] = result.batches_per_epoch;
        d["saved_at_stop"] = result.saved_at_stop;
        return d;
      },
      py::arg("options"), py::arg("on_batch") = py::none(), py::arg("on_epoch") = py::none(),
      py::arg("on_note") = py::none());

  m.def(
      "_evaluate_checkpoint",
      [](const std::string& checkpoint, const std::string& data, const std::string& split,
         const std::string& device, int64_t batch_size, int64_t limit) {
        EvalResult r;
        {
          py::gil_scoped_release nogil;
          r = evaluate_checkpoint(checkpoint, data, split, device, batch_size, limit);
        }
        return eval_dict(r);
      },
      py::arg("checkpoint"), py::arg("data") = "", py::arg("split") = "test",
      py::arg("device") = "auto", py::arg("batch_size") = 1000, py::arg("limit") = 0);
  m.def(
      "_evaluate_model",
      [](nn::Module& model, const nn::ModelSpec& spec, const std::string& data,
         const std::string& split, int64_t batch_size, int64_t limit) {
        EvalResult r;
        {
          py::gil_scoped_release nogil;
          const std::string name = data.empty() ? [&] {
            auto it = spec.train_defaults.find("dataset");
            return it == spec.train_defaults.end() ? std::string("fashion-mnist") : it->second;
          }()
                                                : data;
          data::Dataset ds = load_dataset(name, split, spec);
          if (limit > 0 && limit < ds.size()) ds = ds.slice(0, limit);
          auto [mean, std] = dataset_normalisation(name);
          Device device =
              model.parameters().empty() ? Device::cpu() : model.parameters().front().device();
          r = evaluate(model, spec, ds, device, batch_size, mean, std);
        }
        return eval_dict(r);
      },
      py::arg("model"), py::arg("spec"), py::arg("data") = "", py::arg("split") = "test",
      py::arg("batch_size") = 1000, py::arg("limit") = 0);

  m.def(
      "explain",
      [](py::kwargs kwargs) {
        ExplainOptions o = explain_options().parse(kwargs, "freight.explain");
        ExplainResult r;
        {
          py::gil_scoped_release nogil;
          r = explain(o);
        }
        py::list rows;
        for (const ExplainRow& row : r.rows) {
          py::dict d;
          d["name"] = row.name;
          d["describe"] = row.describe;
          d["kind"] = row.kind;
          d["forward_seconds"] = row.fwd_s;
          d["backward_seconds"] = row.bwd_s;
          d["seconds"] = row.time();
          d["flops"] = row.flops;
          d["bytes"] = row.bytes;
          d["flops_per_second"] = row.rate();
          const double roof = roofline_rate(row, r.peaks);
          d["roof_flops_per_second"] = roof;
          d["fraction_of_roof"] = roof > 0 ? row.rate() / roof : 0.0;
          d["bound"] = bound_by(row, r.peaks);
          d["share"] = r.step_s > 0 ? row.time() / r.step_s : 0.0;
          rows.append(d);
        }
        py::dict d;
        d["model"] = r.model;
        d["device"] = r.device.str();
        d["batch_size"] = r.batch_size;
        d["optimizer"] = r.optimizer;
        d["peaks"] = peaks_dict(r.peaks);
        d["step_seconds"] = r.step_s;
        d["unprofiled_step_seconds"] = r.unprofiled_step_s;
        d["attributed"] = r.attributed;
        d["phases"] =
            py::dict(py::arg("forward") = r.forward_s, py::arg("backward") = r.backward_s,
                     py::arg("autograd_engine") = r.engine_s, py::arg("optimizer") = r.optimizer_s,
                     py::arg("host_to_device") = r.copy_s, py::arg("sync") = r.sync_s,
                     py::arg("other") = r.other_s);
        d["rows"] = rows;
        if (r.data) {
          d["data"] = py::dict(
              py::arg("data") = r.data->data, py::arg("samples") = r.data->samples,
              py::arg("load_seconds") = r.data->load_s, py::arg("batch_seconds") = r.data->batch_s,
              py::arg("batches_timed") = r.data->batches_timed, py::arg("notes") = r.data->notes);
        }
        return d;
      },
      "Where a training step's time goes, layer by layer: the options of `freight explain` "
      "(model, device, batch_size, threads, ...) as keywords; a dict with 'rows'.");

  m.def(
      "plan",
      [](py::kwargs kwargs) {
        PlanOptions o = plan_options().parse(kwargs, "freight.plan");
        PlanResult r;
        {
          py::gil_scoped_release nogil;
          r = plan(o);
        }
        py::list devices;
        for (const DevicePlan& p : r.devices) {
          py::dict d;
          d["label"] = p.label;
          d["measured"] = p.measured;
          d["peaks"] = peaks_dict(p.peaks);
          d["step_seconds"] = p.step_s;
          d["epoch_seconds"] = p.epoch_s;
          d["total_seconds"] = p.total_s;
          d["compute_seconds"] = p.compute_s;
          d["memory_seconds"] = p.memory_s;
          d["overhead_seconds"] = p.overhead_s;
          d["transfer_seconds"] = p.transfer_s;
          d["comm_seconds"] = p.comm_s;
          d["bound"] = p.dominant;
          d["memory_bytes"] = p.total_bytes;
          d["fits"] = p.fits;
          devices.append(d);
        }
        py::dict d;
        d["model"] = r.model;
        d["samples"] = r.samples;
        d["epochs"] = r.epochs;
        d["batch_size"] = r.batch_size;
        d["steps_per_epoch"] = r.steps_per_epoch;
        d["optimizer"] = r.optimizer;
        d["params"] = r.params;
        d["flops_per_step"] = r.flops_per_step;
        d["devices"] = devices;
        d["recommendation"] = r.recommendation;
        d["reason"] = r.reason;
        return d;
      },
      "A prediction of training time per device before training: the options of `freight plan` "
      "(model, samples, epochs, batch_size, ...) as keywords.");

  // ---- checkpoints ----
  m.def(
      "_save_model",
      [](const nn::Module& model, const nn::ModelSpec& spec, const std::string& path) {
        py::gil_scoped_release nogil;
        save_model(path, model, spec);
      },
      py::arg("model"), py::arg("spec"), py::arg("path"));
  m.def(
      "load",
      [](py::handle path_like, const std::string& device) {
        const std::string path = path_arg(path_like);
        LoadedModel l;
        {
          py::gil_scoped_release nogil;
          l = load_model(path, resolve_device(device));
        }
        py::object obj = with_spec(l.model, l.spec);
        obj.attr("metadata") = l.metadata;
        return obj;
      },
      py::arg("path"), py::arg("device") = "cpu",
      "A model from a checkpoint of `freight train` or freight.save, rebuilt from its stored "
      "spec (its .spec and .metadata say what it is).");
  m.def(
      "save_safetensors",
      [](const py::dict& tensors, py::handle path_like,
         const std::map<std::string, std::string>& metadata) {
        const std::string path = path_arg(path_like);
        io::NamedTensors named;
        for (auto [k, v] : tensors) named.emplace_back(k.cast<std::string>(), as_tensor(v));
        py::gil_scoped_release nogil;
        io::save_safetensors(path, named, metadata);
      },
      py::arg("tensors"), py::arg("path"),
      py::arg("metadata") = std::map<std::string, std::string>{},
      "Writes a safetensors file atomically (GPU tensors are copied to the host).");
  m.def(
      "load_safetensors",
      [](py::handle path) {
        io::SafetensorsFile f = io::load_safetensors(path_arg(path));
        py::dict d;
        for (const auto& [k, t] : f.tensors) d[py::str(k)] = t;
        return py::make_tuple(d, f.metadata);
      },
      py::arg("path"), "(tensors, metadata) of a safetensors file, validated.");

  // ---- the machine ----
  m.def("cuda_is_available", [] { return cuda_available(); });
  m.def("cuda_device_count", &cuda_device_count);
  m.def("set_num_threads", &set_num_threads, py::arg("threads"),
        "CPU threads for Freight's kernels and OpenBLAS (0: all cores).");
  m.def("num_threads", &num_threads);
  m.def(
      "synchronize", [](const std::string& device) { synchronize(device_arg(device)); },
      py::arg("device") = "cuda");
}

}  // namespace freight::python
