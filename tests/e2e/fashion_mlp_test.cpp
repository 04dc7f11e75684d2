// Real data end to end: the zoo's mlp trains on a Fashion-MNIST subset to >= 80% test accuracy
// in well under a minute on the CPU.
#include <gtest/gtest.h>

#include <filesystem>

#include "freight/data/dataset.h"
#include "freight/training.h"

namespace freight {
namespace {

TEST(FashionMnist, MlpReaches80PercentOnASubsetQuickly) {
  if (!std::filesystem::exists(data::default_data_dir("fashion-mnist")))
    GTEST_SKIP() << "Fashion-MNIST is not installed (Debian package dataset-fashion-mnist)";
  TrainOptions o;
  o.model = "mlp";
  o.data = "fashion-mnist";
  o.device = "cpu";
  o.epochs = 2;
  o.batch_size = 64;
  o.limit_train = 12000;
  o.limit_test = 2000;
  TrainResult r = train(o);
  ASSERT_EQ(r.epochs.size(), 2u);
  const EpochReport& last = r.epochs.back();
  EXPECT_GE(last.test_accuracy, 0.80) << "test accuracy " << last.test_accuracy;
  EXPECT_LT(last.train_loss, r.epochs.front().train_loss);
  EXPECT_LT(r.wall_seconds, 60.0);
}

}  // namespace
}  // namespace freight
