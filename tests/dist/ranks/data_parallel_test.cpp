// Data-parallel training equals one process on the global batch: the weights after training on
// N ranks match those of train() without data parallelism (run on each rank as the reference)
// within float summation order, the ranks agree bit for bit, and checkpoints move between rank
// counts. Run under mpirun -np 1, 2 and 3 (tests/CMakeLists.txt).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <fstream>

#include "common/test_util.h"
#include "dist/communicator.h"
#include "dist/model_check.h"
#include "freight/data/dataset.h"
#include "freight/freight.h"
#include "freight/nn/model_file.h"
#include "freight/training.h"
#include "rank_test_util.h"

namespace freight {
namespace {

bool have_fashion_mnist() {
  try {
    data::find_data_dir("fashion-mnist");
    return true;
  } catch (const Error&) {
    return false;
  }
}

TrainOptions base_options(const std::string& model, int64_t samples, int64_t batch) {
  TrainOptions o;
  o.model = model;
  o.data = "fashion-mnist";
  o.limit_train = samples;
  o.limit_test = 300;
  o.batch_size = batch;
  o.epochs = 1;
  o.optimizer = "sgd";
  o.lr = 0.05;
  o.momentum = 0.9;
  o.schedule = "none";
  o.seed = 5;
  o.threads = 1;
  o.device = "cpu";
  return o;
}

struct Case {
  std::string model;
  int64_t samples, batch;
};

// 600 samples in batches of 96: a short last batch of 24 (split 8/8/8 or 12/12); 97 in batches
// of 32: a last batch of one row, which leaves ranks without a row at 2 and 3 ranks.
TEST(DataParallel, EqualWeightsToOneProcessOnTheGlobalBatch) {
  if (!have_fashion_mnist()) GTEST_SKIP() << "Fashion-MNIST is not installed";
  const dist::WorldInfo& w = dist::world();
  for (const Case& c : {Case{"mlp", 600, 96}, Case{"mlp", 97, 32}, Case{"lenet5", 600, 96},
                        Case{"lenet5", 97, 32}}) {
    SCOPED_TRACE(
        fmt::format("{} on {} samples, batch {}, {} ranks", c.model, c.samples, c.batch, w.size));
    TrainOptions o = base_options(c.model, c.samples, c.batch);
    manual_seed(o.seed);
    auto init = nn::build_model(nn::load_model_spec(c.model))->state_dict();
    o.distributed = false;
    TrainResult one = train(o);  // what one process reaches (on every rank alike)
    o.distributed = true;
    o.bucket_mb = c.batch == 32 ? 0 : 1;  // one bucket, and several started during backward
    TrainResult job = train(o);
    auto ref = one.model->state_dict(), got = job.model->state_dict();
    dist::NamedTensorList rank0;
    for (const auto& [name, t] : got) rank0.emplace_back(name, test::from_rank0(t));
    const double scale = std::max(1.0, test::max_abs_value(ref));
    EXPECT_LE(test::max_abs_difference(got, ref), 1e-5 * scale);
    EXPECT_GT(test::max_abs_difference(ref, init), 1e-2) << "training did not move the weights";
    EXPECT_EQ(test::max_abs_difference(got, rank0), 0.0) << "the ranks' weights differ";
    if (w.size == 1) {
      EXPECT_EQ(test::max_abs_difference(got, ref), 0.0) << "one rank must be one process";
    }
    ASSERT_EQ(job.epochs.size(), 1u);
    EXPECT_NEAR(job.epochs[0].train_loss, one.epochs[0].train_loss, 1e-5);
    EXPECT_NEAR(job.epochs[0].test_accuracy, one.epochs[0].test_accuracy, 1.0 / 300 + 1e-9);
  }
}

// Accumulation on the job: micro-batches of 32 in groups of 2 over the ranks equal one process
// on batches of 64 (the hooks hold the sums until each group's last backward).
TEST(DataParallel, AccumulatedMicroBatchesEqualOneProcessOnTheirSamples) {
  if (!have_fashion_mnist()) GTEST_SKIP() << "Fashion-MNIST is not installed";
  TrainOptions o = base_options("lenet5", 300, 64);
  o.distributed = false;
  TrainResult one = train(o);
  o.distributed = true;
  o.batch_size = 32;
  o.accumulate = 2;
  o.bucket_mb = 0;
  TrainResult job = train(o);
  auto want = one.model->state_dict(), got = job.model->state_dict();
  EXPECT_LE(test::max_abs_difference(got, want), 1e-5 * std::max(1.0, test::max_abs_value(want)));
  EXPECT_EQ(job.epochs.at(0).step, one.epochs.at(0).step);
}

// --sync-bn: a net with BatchNorm2d and BatchNorm1d (and no dropout, whose draws differ between
// ranks) reaches one process's weights and running statistics on the global batch; without it
// the ranks' own statistics give other weights. A last batch with fewer rows than ranks is
// refused on every rank alike.
TEST(DataParallel, SyncBatchNormEqualsOneProcess) {
  if (!have_fashion_mnist()) GTEST_SKIP() << "Fashion-MNIST is not installed";
  const dist::WorldInfo& w = dist::world();
  test::SharedTempDir dir("dist_sync_bn");
  const std::string model = dir.file("bn-net.json");
  if (w.rank == 0)
    std::ofstream(model) << R"({
  "name": "bn-net", "input": {"shape": [1, 28, 28]}, "classes": 10,
  "layers": [
    {"type": "conv2d", "out": 6, "kernel": 5, "stride": 2, "bias": false}, {"type": "batchnorm"},
    {"type": "relu"}, {"type": "maxpool2d", "kernel": 2}, {"type": "flatten"},
    {"type": "linear", "out": 32, "bias": false}, {"type": "batchnorm"}, {"type": "relu"},
    {"type": "linear", "out": 10}
  ]})";
  dist::barrier("the model file is written");
  TrainOptions o = base_options(model, 300, 64);  // a last batch of 44
  o.sync_bn = true;
  o.distributed = false;
  TrainResult one = train(o);
  o.distributed = true;
  TrainResult job = train(o);
  o.sync_bn = false;
  TrainResult local = train(o);
  auto want = one.model->state_dict();
  const double tol = 1e-5 * std::max(1.0, test::max_abs_value(want));
  EXPECT_LE(test::max_abs_difference(job.model->state_dict(), want), tol);
  if (w.size > 1) {
    EXPECT_GT(test::max_abs_difference(local.model->state_dict(), want), 1e-3)
        << "the ranks' own statistics should have given other weights";
  }

  o = base_options(model, 97, 32);  // a last batch of one row
  o.sync_bn = true;
  if (w.size > 1) {
    std::string error = "(none)";
    try {
      train(o);
    } catch (const Error& e) {
      error = e.what();
    }
    EXPECT_NE(error.find("--sync-bn: the last batch of each epoch has 1 sample"), std::string::npos)
        << error;
  }
}

// A checkpoint does not depend on the number of ranks: 1 epoch on the job then 1 more in one
// process, and 1 epoch in one process then 1 more on the job, both reach the 2-epoch run's
// weights.
TEST(DataParallel, CheckpointsMoveBetweenRankCounts) {
  if (!have_fashion_mnist()) GTEST_SKIP() << "Fashion-MNIST is not installed";
  const dist::WorldInfo& w = dist::world();
  test::SharedTempDir dir("dist_resume");
  TrainOptions o = base_options("lenet5", 300, 64);
  o.epochs = 2;
  TrainResult straight = train(o);  // the job, 2 epochs
  auto want = straight.model->state_dict();
  const double tol = 1e-5 * std::max(1.0, test::max_abs_value(want));

  // The job's checkpoint after epoch 1, continued in one process (each rank on its own copy).
  o.epochs = 1;
  o.save = dir.file("job.safetensors");
  train(o);
  TrainOptions resumed = o;
  resumed.distributed = false;
  resumed.resume = o.save;
  resumed.save = dir.file(fmt::format("alone{}.safetensors", w.rank));
  resumed.epochs = 2;
  resumed.model.clear();
  TrainResult alone = train(resumed);
  EXPECT_LE(test::max_abs_difference(alone.model->state_dict(), want), tol);
  ASSERT_EQ(alone.epochs.size(), 1u);
  EXPECT_EQ(alone.epochs[0].epoch, 2);

  // One process's checkpoint after epoch 1 (rank 0's), continued by the job.
  TrainOptions first = o;
  first.distributed = false;
  first.save = dir.file(fmt::format("one{}.safetensors", w.rank));
  train(first);
  dist::barrier("rank 0's checkpoint is written");
  TrainOptions job = o;
  job.resume = dir.file("one0.safetensors");
  job.save = dir.file("job2.safetensors");
  job.epochs = 2;
  job.model.clear();
  TrainResult continued = train(job);
  EXPECT_LE(test::max_abs_difference(continued.model->state_dict(), want), tol);
}

}  // namespace
}  // namespace freight
