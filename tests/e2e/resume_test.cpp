// Checkpoints and resume: 2 epochs in one run give exactly the parameters of 1 epoch, a save,
// and 1 more epoch resumed from the checkpoint (same seed, CPU). Dropout and batch norm are in
// the model so the RNG state and running statistics must round-trip too, and a step schedule
// (whose curve, unlike cosine's, does not depend on the total number of epochs) so the
// schedule's position must as well.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>

#include "common/test_util.h"
#include "freight/error.h"
#include "freight/io/safetensors.h"
#include "freight/training.h"

namespace freight {
namespace {

namespace fs = std::filesystem;

class Resume : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("freight_resume_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    model_ = (dir_ / "small.json").string();
    std::ofstream(model_) << R"({
      "name": "small", "input": {"shape": [1, 8, 8]}, "classes": 4,
      "layers": [
        {"type": "conv2d", "out": 4, "kernel": 3, "padding": 1}, {"type": "batchnorm"},
        {"type": "relu"}, {"type": "maxpool2d", "kernel": 2}, {"type": "flatten"},
        {"type": "dropout", "p": 0.2}, {"type": "linear", "out": 4}],
      "train": {"dataset": "synthetic", "batch_size": 32, "optimizer": "adamw", "lr": 0.01,
                "schedule": "step", "step_size": 1, "gamma": 0.5}})";
  }
  void TearDown() override { fs::remove_all(dir_); }
  TrainOptions options(int64_t epochs, const std::string& save) {
    TrainOptions o;
    o.model = model_;
    o.device = "cpu";
    o.epochs = epochs;
    o.seed = 7;
    o.save = save;
    return o;
  }
  fs::path dir_;
  std::string model_;
};

TEST_F(Resume, TwoEpochsEqualOnePlusResumedOne) {
  std::string straight = (dir_ / "straight.safetensors").string();
  std::string split = (dir_ / "split.safetensors").string();
  train(options(2, straight));
  train(options(1, split));
  TrainOptions more = options(2, split);
  more.resume = split;
  TrainResult r = train(more);
  ASSERT_EQ(r.epochs.size(), 1u) << "resuming at epoch 2 runs only epoch 2";
  EXPECT_EQ(r.epochs[0].epoch, 2);

  io::SafetensorsFile a = io::load_safetensors(straight), b = io::load_safetensors(split);
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    EXPECT_EQ(a.tensors[i].first, b.tensors[i].first);
    EXPECT_EQ(a.tensors[i].second.to_double_vector(), b.tensors[i].second.to_double_vector())
        << a.tensors[i].first << " differs after resuming";
  }
  EXPECT_EQ(a.metadata.at("step"), b.metadata.at("step"));
}

TEST_F(Resume, MismatchedTrainingStateIsAClearError) {
  std::string p = (dir_ / "c.safetensors").string();
  train(options(1, p));
  // Pretend the process died between writing the model and its training state.
  io::SafetensorsFile f = io::load_safetensors(p);
  f.metadata["step"] = "999";
  io::save_safetensors(p, f.tensors, f.metadata);
  TrainOptions o = options(2, p);
  o.resume = p;
  try {
    train(o);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("interrupted"), std::string::npos) << e.what();
  }
}

// The files a save leaves when the process dies after replacing the checkpoint but before
// renaming its staged training state over the old one (the commit order in
// src/training/checkpoint.h): the checkpoint is the new save, <path>.train the previous one and
// <path>.train.next the new one. Resuming finds the new state, finishes the rename and reaches
// the weights of an uninterrupted run.
TEST_F(Resume, ASaveCutOffAfterItsCommitPointResumes) {
  std::string straight = (dir_ / "straight.safetensors").string();
  std::string split = (dir_ / "split.safetensors").string();
  train(options(3, straight));
  train(options(1, split));
  fs::copy_file(split + ".train", dir_ / "epoch1.train");
  TrainOptions two = options(2, split);
  two.resume = split;
  train(two);
  fs::rename(split + ".train", split + ".train.next");
  fs::copy_file(dir_ / "epoch1.train", split + ".train");

  TrainOptions three = options(3, split);
  three.resume = split;
  TrainResult r = train(three);
  ASSERT_EQ(r.epochs.size(), 1u);
  EXPECT_EQ(r.epochs[0].epoch, 3);
  EXPECT_FALSE(fs::exists(split + ".train.next")) << "the interrupted rename is completed";
  io::SafetensorsFile a = io::load_safetensors(straight), b = io::load_safetensors(split);
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (size_t i = 0; i < a.tensors.size(); ++i)
    EXPECT_EQ(a.tensors[i].second.to_double_vector(), b.tensors[i].second.to_double_vector())
        << a.tensors[i].first;
}

// Cut off before the commit point: the pair is the previous save, beside it a staged state of a
// later save that never committed (here epoch 2's state of a twin run). Resuming uses the pair,
// never the staged state, and reaches the weights of an uninterrupted run.
TEST_F(Resume, ASaveCutOffBeforeItsCommitPointResumesThePreviousOne) {
  std::string straight = (dir_ / "straight.safetensors").string();
  std::string p = (dir_ / "c.safetensors").string(), twin = (dir_ / "twin.safetensors").string();
  train(options(2, straight));
  train(options(1, p));
  train(options(1, twin));
  TrainOptions twin2 = options(2, twin);
  twin2.resume = twin;
  train(twin2);
  fs::copy_file(twin + ".train", p + ".train.next");
  TrainOptions more = options(2, p);
  more.resume = p;
  TrainResult r = train(more);
  ASSERT_EQ(r.epochs.size(), 1u);
  EXPECT_EQ(r.epochs[0].epoch, 2);
  io::SafetensorsFile a = io::load_safetensors(straight), b = io::load_safetensors(p);
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (size_t i = 0; i < a.tensors.size(); ++i)
    EXPECT_EQ(a.tensors[i].second.to_double_vector(), b.tensors[i].second.to_double_vector())
        << a.tensors[i].first;
}

void expect_same_parameters(const std::string& a_path, const std::string& b_path) {
  io::SafetensorsFile a = io::load_safetensors(a_path), b = io::load_safetensors(b_path);
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    EXPECT_EQ(a.tensors[i].first, b.tensors[i].first);
    EXPECT_EQ(a.tensors[i].second.to_double_vector(), b.tensors[i].second.to_double_vector())
        << a.tensors[i].first << " differs after resuming";
  }
  EXPECT_EQ(a.metadata.at("step"), b.metadata.at("step"));
}

// A stop request (Ctrl-C in the command) in the middle of an epoch saves a checkpoint that
// resumes from the next batch of that epoch: same batches, same dropout draws, same running
// statistics, same schedule, same epoch sums. Stopped twice (in epochs 1 and 2) and resumed each
// time, the run reaches the weights and the epoch reports of an uninterrupted one.
TEST_F(Resume, AStopInTheMiddleOfAnEpochResumesFromTheNextBatch) {
  std::string straight = (dir_ / "straight.safetensors").string();
  std::string cut = (dir_ / "cut.safetensors").string();
  TrainResult whole = train(options(3, straight));
  int64_t batches = 4096 / 32;

  std::atomic<bool> stop{false};
  int64_t stop_after = 0;  // (epoch - 1) * batches + batch
  TrainCallbacks cb;
  cb.stop = &stop;
  cb.on_batch = [&](const BatchProgress& p) {
    if ((p.epoch - 1) * batches + p.batch == stop_after) stop = true;
  };
  std::vector<EpochReport> reports;
  cb.on_epoch = [&](const EpochReport& r) { reports.push_back(r); };

  stop_after = 37;
  TrainResult a = train(options(3, cut), cb);
  EXPECT_TRUE(a.interrupted);
  EXPECT_TRUE(a.saved_at_stop);
  EXPECT_EQ(a.stopped_epoch, 1);
  EXPECT_EQ(a.stopped_batch, 37);
  EXPECT_EQ(a.batches_per_epoch, batches);
  EXPECT_EQ(a.checkpoint, cut);
  EXPECT_EQ(io::load_safetensors(cut).metadata.at("batch"), "37");

  stop = false;
  stop_after = batches + 90;
  TrainOptions more = options(3, cut);
  more.resume = cut;
  TrainResult b = train(more, cb);
  EXPECT_TRUE(b.interrupted);
  EXPECT_EQ(b.stopped_epoch, 2);
  EXPECT_EQ(b.stopped_batch, 90);

  stop = false;
  stop_after = -1;
  TrainResult c = train(more, cb);
  EXPECT_FALSE(c.interrupted);
  ASSERT_EQ(c.epochs.size(), 2u) << "epochs 2 and 3";
  expect_same_parameters(straight, cut);
  ASSERT_EQ(reports.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(reports[i].epoch, whole.epochs[i].epoch);
    EXPECT_EQ(reports[i].step, whole.epochs[i].step);
    // The sums of an epoch's first part travel in the checkpoint (as text, 17 digits).
    EXPECT_DOUBLE_EQ(reports[i].train_loss, whole.epochs[i].train_loss) << "epoch " << i + 1;
    EXPECT_EQ(reports[i].train_accuracy, whole.epochs[i].train_accuracy) << "epoch " << i + 1;
    EXPECT_EQ(reports[i].test_accuracy, whole.epochs[i].test_accuracy) << "epoch " << i + 1;
  }
}

// A stop after the last batch of an epoch (before its evaluation) resumes into that epoch's end.
TEST_F(Resume, AStopAfterTheLastBatchOfAnEpochResumesItsEnd) {
  std::string straight = (dir_ / "straight.safetensors").string();
  std::string cut = (dir_ / "cut.safetensors").string();
  train(options(2, straight));
  std::atomic<bool> stop{false};
  TrainCallbacks cb;
  cb.stop = &stop;
  cb.on_batch = [&](const BatchProgress& p) {
    if (p.epoch == 1 && p.batch == p.batches - 1) stop = true;
  };
  TrainResult a = train(options(2, cut), cb);
  ASSERT_TRUE(a.interrupted);
  EXPECT_EQ(a.stopped_batch, a.batches_per_epoch - 1);
  TrainOptions more = options(2, cut);
  more.resume = cut;
  TrainResult b = train(more);
  EXPECT_FALSE(b.interrupted);
  ASSERT_EQ(b.epochs.size(), 2u);
  expect_same_parameters(straight, cut);
}

// A stopped epoch can only continue with the same sample order.
TEST_F(Resume, ContinuingAStoppedEpochWithAnotherSeedIsRefused) {
  std::string cut = (dir_ / "cut.safetensors").string();
  std::atomic<bool> stop{false};
  TrainCallbacks cb;
  cb.stop = &stop;
  cb.on_batch = [&](const BatchProgress& p) {
    if (p.batch == 5) stop = true;
  };
  train(options(2, cut), cb);
  TrainOptions more = options(2, cut);
  more.resume = cut;
  more.seed = 8;
  std::string m = test::error_of([&] { train(more); });
  EXPECT_NE(m.find("--seed 7, now 8"), std::string::npos) << m;
  more.seed = 7;
  more.limit_train = 1000;
  m = test::error_of([&] { train(more); });
  EXPECT_NE(m.find("--limit-train"), std::string::npos) << m;
}

// Without a save path a stop still ends the run after the step under way; nothing is written.
TEST_F(Resume, AStopWithoutASavePathSavesNothing) {
  std::atomic<bool> stop{true};  // already set: the run stops before its first step
  TrainCallbacks cb;
  cb.stop = &stop;
  TrainResult r = train(options(2, ""), cb);
  EXPECT_TRUE(r.interrupted);
  EXPECT_EQ(r.stopped_epoch, 1);
  EXPECT_EQ(r.stopped_batch, 0);
  EXPECT_TRUE(r.checkpoint.empty());
  EXPECT_TRUE(r.epochs.empty());
}

// What a resumed run takes from the checkpoint rather than the options, it says (the learning
// rate) or refuses to mix (another schedule).
TEST_F(Resume, ALearningRateOrScheduleOtherThanTheCheckpointsIsNamed) {
  std::string p = (dir_ / "c.safetensors").string();
  train(options(1, p));
  TrainOptions more = options(2, p);
  more.resume = p;
  more.lr = 0.5;
  std::vector<std::string> notes;
  TrainCallbacks cb;
  cb.note = [&](const std::string& s) { notes.push_back(s); };
  fs::copy_file(p, dir_ / "keep");
  fs::copy_file(p + ".train", dir_ / "keep.train");
  train(more, cb);
  bool said = false;
  for (const std::string& n : notes)
    said = said || n.find("--lr 0.5 is ignored") != std::string::npos;
  EXPECT_TRUE(said) << "no note about --lr";
  fs::copy_file(dir_ / "keep", p, fs::copy_options::overwrite_existing);
  fs::copy_file(dir_ / "keep.train", p + ".train", fs::copy_options::overwrite_existing);
  more.lr = 0.01;  // the run's own --lr: nothing to say
  notes.clear();
  train(more, cb);
  for (const std::string& n : notes) EXPECT_EQ(n.find("is ignored"), std::string::npos) << n;
  more.schedule = "cosine";
  std::string m = test::error_of([&] { train(more); });
  EXPECT_NE(m.find("saved with --schedule step, now cosine"), std::string::npos) << m;
}

// Resuming without --batch-size or --schedule continues with the checkpoint's (here not the
// model's defaults, 32 and step); naming another is refused, saying which.
TEST_F(Resume, ResumingTakesTheCheckpointsBatchSizeAndSchedule) {
  std::string p = (dir_ / "c.safetensors").string();
  TrainOptions first = options(1, p);
  first.batch_size = 16;
  first.schedule = "cosine";
  const int64_t batches = train(first).batches_per_epoch;
  fs::copy_file(p, dir_ / "keep");
  fs::copy_file(p + ".train", dir_ / "keep.train");
  TrainOptions more = options(2, p);
  more.resume = p;
  TrainResult r = train(more);
  ASSERT_EQ(r.epochs.size(), 1u);
  EXPECT_EQ(r.batches_per_epoch, batches) << "the epoch in batches of 16, not the model's 32";
  fs::copy_file(dir_ / "keep", p, fs::copy_options::overwrite_existing);
  fs::copy_file(dir_ / "keep.train", p + ".train", fs::copy_options::overwrite_existing);
  more.batch_size = 8;
  std::string m = test::error_of([&] { train(more); });
  EXPECT_NE(m.find("saved with --batch-size 16, now 8"), std::string::npos) << m;
}

// The optimizer flags of the first run (not the model's adamw) are the checkpoint's: resuming
// without repeating them reaches the weights of an uninterrupted run, and naming another
// momentum is refused.
TEST_F(Resume, ResumingWithoutTheOptimizerFlagsContinuesTheSavedOptimizer) {
  auto with_flags = [&](int64_t epochs, const std::string& save) {
    TrainOptions o = options(epochs, save);
    o.optimizer = "nesterov";
    o.momentum = 0.5;
    o.weight_decay = 1e-3;
    return o;
  };
  std::string straight = (dir_ / "straight.safetensors").string();
  std::string split = (dir_ / "split.safetensors").string();
  train(with_flags(2, straight));
  train(with_flags(1, split));
  fs::copy_file(split, dir_ / "keep");
  fs::copy_file(split + ".train", dir_ / "keep.train");
  TrainOptions more = options(2, split);
  more.resume = split;
  train(more);
  io::SafetensorsFile a = io::load_safetensors(straight), b = io::load_safetensors(split);
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (size_t i = 0; i < a.tensors.size(); ++i)
    EXPECT_EQ(a.tensors[i].second.to_double_vector(), b.tensors[i].second.to_double_vector())
        << a.tensors[i].first << " differs after resuming";

  fs::copy_file(dir_ / "keep", split, fs::copy_options::overwrite_existing);
  fs::copy_file(dir_ / "keep.train", split + ".train", fs::copy_options::overwrite_existing);
  more.momentum = 0.9;
  std::string m = test::error_of([&] { train(more); });
  EXPECT_NE(m.find("saved with --momentum 0.5, now 0.9"), std::string::npos) << m;
}

}  // namespace
}  // namespace freight
