// A Freight checkpoint loads into the equivalent PyTorch model (Debian's python3-torch, strict
// state_dict loading) and gives the same test accuracy.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/test_util.h"
#include "freight/data/dataset.h"
#include "freight/training.h"

namespace freight {
namespace {

namespace fs = std::filesystem;

TEST(Interop, PyTorchLoadsTheCheckpointAndAgreesOnAccuracy) {
  std::string dir = data::default_data_dir("fashion-mnist");
  if (!fs::exists(dir)) GTEST_SKIP() << "Fashion-MNIST is not installed";
  if (test::shell("/usr/bin/python3 -c 'import torch'").status != 0)
    GTEST_SKIP() << "python3-torch is not installed";

  fs::path tmp = fs::temp_directory_path() / ("freight_interop_" + std::to_string(::getpid()));
  fs::create_directories(tmp);
  std::string ckpt = (tmp / "lenet5.safetensors").string();
  TrainOptions o;
  o.model = "lenet5";  // convolutions, pooling and linear layers
  o.device = "cpu";
  o.epochs = 1;
  o.limit_train = 6000;
  o.save = ckpt;
  train(o);
  const int64_t limit = 2000;
  EvalResult ours = evaluate_checkpoint(ckpt, "fashion-mnist", "test", "cpu", 1000, limit);

  auto [mean, std] = dataset_normalisation("fashion-mnist");
  std::string cmd = fmt::format(
      "/usr/bin/python3 {}/bench/pytorch/eval_checkpoint.py {} {}/t10k-images-idx3-ubyte.gz "
      "{}/t10k-labels-idx1-ubyte.gz {} {} {}",
      FREIGHT_TEST_SOURCE_DIR, ckpt, dir, dir, mean, std, limit);
  test::ShellRun r = test::shell(cmd);
  const std::string& out = r.output;
  fs::remove_all(tmp);
  ASSERT_EQ(r.status, 0) << out;
  auto j = nlohmann::json::parse(out.substr(out.find('{')));
  EXPECT_EQ(j["samples"].get<int64_t>(), limit);
  // Same weights, same inputs: predictions agree except where two logits tie within float
  // rounding, so the accuracies match to a sample or two.
  EXPECT_NEAR(j["accuracy"].get<double>(), ours.accuracy, 2.0 / limit) << out;
  EXPECT_NEAR(j["loss"].get<double>(), ours.loss, 1e-3) << out;
}

}  // namespace
}  // namespace freight
