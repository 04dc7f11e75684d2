// A training set whose size leaves one sample for the last batch of each epoch: BatchNorm cannot
// normalise a one-row batch after a Linear layer (one value per channel), so training leaves
// that batch out of every epoch, says so once, and finishes; a set of one sample in all is a
// clear error before the first step, and a batch size of 1 names the layer and the shape.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "common/test_util.h"
#include "freight/error.h"
#include "freight/training.h"

namespace freight {
namespace {

namespace fs = std::filesystem;

class BatchNormLastBatch : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("freight_bn_last_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    model_ = (dir_ / "bn1d.json").string();
    std::ofstream(model_) << R"({
      "name": "bn1d", "input": {"shape": [1, 4, 4]}, "classes": 3,
      "layers": [{"type": "flatten"}, {"type": "linear", "out": 8}, {"type": "batchnorm"},
                 {"type": "relu"}, {"type": "linear", "out": 3}],
      "train": {"dataset": "synthetic", "batch_size": 16, "optimizer": "sgd", "lr": 0.05}})";
  }
  void TearDown() override { fs::remove_all(dir_); }
  TrainOptions options(int64_t samples) {
    TrainOptions o;
    o.model = model_;
    o.device = "cpu";
    o.epochs = 2;
    o.limit_train = samples;
    o.limit_test = 32;
    return o;
  }
  fs::path dir_;
  std::string model_;
};

TEST_F(BatchNormLastBatch, ALoneLastSampleIsLeftOutOfEachEpochWithANote) {
  std::vector<std::string> notes;
  TrainCallbacks cb;
  cb.note = [&](const std::string& s) { notes.push_back(s); };
  TrainResult r = train(options(33), cb);  // 33 = 2 · 16 + 1
  EXPECT_EQ(r.batches_per_epoch, 2);
  ASSERT_EQ(r.epochs.size(), 2u);
  int said = 0;
  for (const std::string& n : notes)
    said += test::has(n, "1 sample (33 % --batch-size 16)") && test::has(n, "BatchNorm1d(8)");
  EXPECT_EQ(said, 1) << "one note naming the batch and the layer";

  notes.clear();
  r = train(options(34), cb);  // a last batch of 2 normalises: nothing is left out
  EXPECT_EQ(r.batches_per_epoch, 3);
  for (const std::string& n : notes) EXPECT_FALSE(test::has(n, "left out")) << n;
}

TEST_F(BatchNormLastBatch, OneSampleInAllIsAClearErrorBeforeTraining) {
  std::string m = test::error_of([&] { train(options(1)); });
  EXPECT_TRUE(test::has(m, "BatchNorm1d(8)")) << m;
  EXPECT_TRUE(test::has(m, "--limit-train")) << m;
}

TEST_F(BatchNormLastBatch, BatchSizeOneNamesTheLayerAndTheShape) {
  TrainOptions o = options(8);
  o.batch_size = 1;
  std::string m = test::error_of([&] { train(o); });
  EXPECT_TRUE(test::has(m, "BatchNorm1d(8)")) << m;
  EXPECT_TRUE(test::has(m, "[1, 8]")) << m;
  EXPECT_TRUE(test::has(m, "at least 2 samples")) << m;
}

}  // namespace
}  // namespace freight
