// Checkpoints and resume: 2 epochs in one run give exactly the parameters of 1 epoch, a save,
// and 1 more epoch resumed from the checkpoint (same seed, CPU). Dropout and batch norm are in
// the model so the RNG state and running statistics must round-trip too, and a step schedule
// (whose curve, unlike cosine's, does not depend on the total number of epochs) so the
// schedule's position must as well.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

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

}  // namespace
}  // namespace freight
