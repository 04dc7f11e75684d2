// No silent defaults: every numeric (and fixed-choice) flag of every subcommand is checked when
// the command line is parsed, so a bad value is an error that names the flag and the value,
// exits 1 and happens before any work (nothing at all is printed before the error). Before this
// was enforced, `-1` and `nan` were read as "the model's default" and training went on.
// The same holds for a model file's "train" block and for TrainOptions set through the C++ API.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include "common/test_util.h"
#include "freight/error.h"
#include "freight/training.h"

namespace {

namespace fs = std::filesystem;

struct BadFlag {
  std::string command;  // subcommand and the arguments it needs besides the flag under test
  std::string flag;     // as typed (may be a short alias)
  std::string value;
  std::string named;  // the flag's name the message must carry
};

std::ostream& operator<<(std::ostream& os, const BadFlag& b) {
  return os << b.command << " " << b.flag << " " << b.value;
}

// Quick settings for `train`, so that a run that wrongly goes ahead (as before the checks) ends
// soon; the flag under test replaces its own entry.
const std::map<std::string, std::string> kQuickTrain = {
    {"--epochs", "1"}, {"--limit-train", "64"}, {"--limit-test", "64"}};

std::string command_line(const BadFlag& b) {
  std::string cmd = b.command;
  if (b.command.starts_with("train"))
    for (const auto& [flag, value] : kQuickTrain)
      if (flag != b.flag) cmd += " " + flag + " " + value;
  return cmd + " " + b.flag + " " + b.value;
}

const std::string kTrain = "train --model mlp --data synthetic --device cpu --no-save";
const std::string kEval = "eval no-such-checkpoint.safetensors --data synthetic --device cpu";
const std::string kSummary = "summary --model mlp";
const std::string kBench = "bench --quick --devices cpu --no-plots --models mlp --out " +
                           (fs::temp_directory_path() / "freight_flags_bench").string();
const std::string kExplain = "explain --model mlp --device cpu --no-plot";
const std::string kPlan = "plan --model mlp";

const BadFlag kBadFlags[] = {
    // train: the values the issue lists first
    {kTrain, "--batch-size", "-1", "--batch-size"},
    {kTrain, "--batch-size", "0", "--batch-size"},
    {kTrain, "-b", "10000000000000", "--batch-size"},
    {kTrain, "--batch-size", "2.5", "--batch-size"},
    {kTrain, "--test-batch-size", "0", "--test-batch-size"},
    {kTrain, "--test-batch-size", "-1", "--test-batch-size"},
    {kTrain, "--test-batch-size", "10000000000000", "--test-batch-size"},
    {kTrain, "--epochs", "-1", "--epochs"},
    {kTrain, "--epochs", "0", "--epochs"},
    {kTrain, "-e", "10000000", "--epochs"},
    {kTrain, "--epochs", "3x", "--epochs"},
    {kTrain, "--lr", "nan", "--lr"},
    {kTrain, "--lr", "-1", "--lr"},
    {kTrain, "--lr", "0", "--lr"},
    {kTrain, "--lr", "inf", "--lr"},
    {kTrain, "--momentum", "-1", "--momentum"},
    {kTrain, "--momentum", "1", "--momentum"},
    {kTrain, "--momentum", "nan", "--momentum"},
    {kTrain, "--weight-decay", "-1", "--weight-decay"},
    {kTrain, "--weight-decay", "nan", "--weight-decay"},
    {kTrain, "--threads", "-3", "--threads"},
    {kTrain, "--threads", "100000", "--threads"},
    {kTrain, "--limit-train", "-5", "--limit-train"},
    {kTrain, "--limit-train", "0", "--limit-train"},
    {kTrain, "--limit-test", "-5", "--limit-test"},
    {kTrain, "--limit-test", "0", "--limit-test"},
    {kTrain, "--seed", "-1", "--seed"},
    {kTrain, "--seed", "1e3", "--seed"},
    {kTrain, "--log-interval", "0", "--log-interval"},
    {kTrain, "--log-interval", "-2", "--log-interval"},
    {kTrain, "--optimizer", "rmsprop", "--optimizer"},
    {kTrain, "--schedule", "linear", "--schedule"},
    {kTrain, "--precision", "fp8", "--precision"},
    {kTrain, "--nproc", "0", "--nproc"},
    {kTrain, "--nproc", "-2", "--nproc"},
    {kTrain, "--nproc", "two", "--nproc"},
    {kTrain, "--bucket-mb", "-1", "--bucket-mb"},
    {kTrain, "--accumulate", "0", "--accumulate"},
    {kTrain, "--accumulate", "-4", "--accumulate"},
    {kTrain, "--accumulate", "2.5", "--accumulate"},
    {kTrain, "--bucket-mb", "5000", "--bucket-mb"},
    {kTrain, "--dist-timeout", "0", "--dist-timeout"},
    {kTrain, "--dist-timeout", "nan", "--dist-timeout"},
    {kTrain, "--dist-timeout", "-3", "--dist-timeout"},
    // eval
    {kEval, "--batch-size", "0", "--batch-size"},
    {kEval, "-b", "-1", "--batch-size"},
    {kEval, "--batch-size", "10000000000000", "--batch-size"},
    {kEval, "--limit", "-1", "--limit"},
    {kEval, "--limit", "0", "--limit"},
    {kEval, "--split", "validation", "--split"},
    // summary
    {kSummary, "-b", "0", "--batch-size"},
    {kSummary, "--batch-size", "-1", "--batch-size"},
    {kSummary, "--batch-size", "10000000000000", "--batch-size"},
    {kSummary, "--depth", "0", "--depth"},
    {kSummary, "--depth", "-1", "--depth"},
    // bench (lists are checked item by item)
    {kBench, "--batch-sizes", "64,-1", "--batch-sizes"},
    {kBench, "--batch-sizes", "10000000000000", "--batch-sizes"},
    {kBench, "--threads", "-3", "--threads"},
    {kBench, "--threads", "1,100000", "--threads"},
    {kBench, "--seconds", "-1", "--seconds"},
    {kBench, "--seconds", "nan", "--seconds"},
    {kBench, "--min-rounds", "0", "--min-rounds"},
    {kBench, "--max-step-seconds", "-1", "--max-step-seconds"},
    {kBench, "--max-step-seconds", "nan", "--max-step-seconds"},
    {kBench, "--rerun-apart", "-1", "--rerun-apart"},
    {kBench, "--rerun-apart", "1000", "--rerun-apart"},
    // explain
    {kExplain, "-b", "0", "--batch-size"},
    {kExplain, "--batch-size", "-1", "--batch-size"},
    {kExplain, "--threads", "-1", "--threads"},
    {kExplain, "--threads2", "-1", "--threads2"},
    {kExplain, "--steps", "0", "--steps"},
    {kExplain, "--warmup", "-1", "--warmup"},
    {kExplain, "--top", "-1", "--top"},
    // plan
    {kPlan, "-n", "0", "--samples"},
    {kPlan, "--samples", "-1", "--samples"},
    {kPlan, "-e", "0", "--epochs"},
    {kPlan, "--epochs", "-1", "--epochs"},
    {kPlan, "-b", "0", "--batch-size"},
    {kPlan, "--batch-size", "-1", "--batch-size"},
    {kPlan, "--optimizer", "rmsprop", "--optimizer"},
    // An empty value is not the default either (the shell passes '' as an empty argument).
    {"train --model mlp --device cpu --no-save", "--data", "''", "--data"},
    {"train --model mlp --data synthetic --device cpu", "--save", "''", "--save"},
    {"train --model mlp --data synthetic --device cpu --no-save", "--metrics", "''", "--metrics"},
    {"summary", "--model", "''", "--model"},
    {"eval --data synthetic", "--checkpoint", "''", "--checkpoint"},
    {kBench, "--name", "''", "--name"},
};

class BadFlags : public ::testing::TestWithParam<BadFlag> {};

TEST_P(BadFlags, FailBeforeAnyWorkNamingTheFlagAndValue) {
  const BadFlag& b = GetParam();
  freight::test::ShellRun r =
      freight::test::shell(std::string(FREIGHT_CLI_PATH) + " " + command_line(b));
  EXPECT_EQ(r.status, 1) << r.output;
  // The error is all there is: no device note, no header, no epoch line before it.
  size_t start = r.output.find_first_not_of(" \n");
  EXPECT_EQ(r.output.compare(start == std::string::npos ? 0 : start, 15, "freight: error:"), 0)
      << "something ran before the error:\n"
      << r.output;
  EXPECT_NE(r.output.find(b.named), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(b.value), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("\nepoch "), std::string::npos) << "an epoch ran:\n" << r.output;
  EXPECT_EQ(r.output.find("test accuracy"), std::string::npos) << r.output;
}

INSTANTIATE_TEST_SUITE_P(EverySubcommand, BadFlags, ::testing::ValuesIn(kBadFlags));

// The edges of the ranges are accepted: a flag set to its smallest valid value is not an error.
TEST(GoodFlags, SmallestValidValuesTrain) {
  freight::test::ShellRun r = freight::test::shell(
      std::string(FREIGHT_CLI_PATH) + " " + kTrain +
      " --epochs 1 --batch-size 1 --test-batch-size 1 --limit-train 3 --limit-test 2 --lr 1e-9"
      " --momentum 0 --weight-decay 0 --seed 0 --threads 0 --log-interval 1");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("test accuracy"), std::string::npos) << r.output;
}

// nesterov reads momentum 0, and adamw weight decay 0, as "use my default" (0.9, 0.01): an
// explicit 0 would be silently replaced, so it is refused with what to do instead.
TEST(ExplicitZero, IsNotReplacedByTheOptimizersDefault) {
  struct Case {
    std::string args, named, advice;
  } cases[] = {{"--optimizer adamw --weight-decay 0", "--weight-decay 0", "--optimizer adam"},
               {"--optimizer nesterov --momentum 0", "--momentum 0", "--optimizer sgd"}};
  for (const Case& c : cases) {
    freight::test::ShellRun r = freight::test::shell(std::string(FREIGHT_CLI_PATH) + " " + kTrain +
                                                     " --epochs 1 --limit-train 8 " + c.args);
    EXPECT_EQ(r.status, 1) << c.args << ":\n" << r.output;
    EXPECT_NE(r.output.find("freight: error: " + c.named), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(c.advice), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("\nepoch "), std::string::npos) << r.output;
  }
}

class ModelFileDefaults : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("freight_flags_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  // A small model whose "train" block holds `train` (JSON members).
  std::string model(const std::string& train) {
    std::string p = (dir_ / "small.json").string();
    std::ofstream(p) << R"({"name": "small", "input": {"shape": [1, 4, 4]}, "classes": 3,
      "layers": [{"type": "flatten"}, {"type": "linear", "out": 3}],
      "train": {"dataset": "synthetic", )"
                     << train << "}}";
    return p;
  }
  fs::path dir_;
};

// A bad default in a model file is an error naming the file, the key and the value, in every
// command that reads the defaults (train, explain, plan).
TEST_F(ModelFileDefaults, BadValuesNameTheFileAndKey) {
  struct Case {
    std::string train, key, value;
  } cases[] = {{R"("batch_size": -3)", "batch_size", "-3"},
               {R"("batch_size": 2.5)", "batch_size", "2.5"},
               {R"("epochs": 1e12)", "epochs", "1000000000000"},
               {R"("lr": "nan")", "lr", "nan"},
               {R"("lr": -0.1)", "lr", "-0.1"},
               {R"("momentum": 1.5)", "momentum", "1.5"},
               {R"("weight_decay": -1)", "weight_decay", "-1"},
               {R"("step_size": 0)", "step_size", "0"},
               {R"("gamma": "x")", "gamma", "x"},
               {R"("optimizer": "rmsprop")", "optimizer", "rmsprop"},
               {R"("optimizer": "adamw", "weight_decay": 0)", "weight_decay", "0"},
               {R"("optimizer": "nesterov", "momentum": 0.0)", "momentum", "0.0"},
               {R"("schedule": "linear")", "schedule", "linear"}};
  for (const Case& c : cases) {
    std::string file = model(c.train);
    for (const std::string cmd : {"train --device cpu --no-save --limit-train 8",
                                  "explain --device cpu --no-plot", "plan"}) {
      if (cmd != "train --device cpu --no-save --limit-train 8" &&
          (c.key == "epochs" || c.key == "step_size" || c.key == "gamma" || c.key == "schedule"))
        continue;  // settings only training reads
      freight::test::ShellRun r =
          freight::test::shell(std::string(FREIGHT_CLI_PATH) + " " + cmd + " --model " + file);
      EXPECT_EQ(r.status, 1) << cmd << " with " << c.train << ":\n" << r.output;
      EXPECT_NE(r.output.find("freight: error:"), std::string::npos) << r.output;
      EXPECT_NE(r.output.find(file), std::string::npos) << r.output;
      EXPECT_NE(r.output.find("train." + c.key), std::string::npos) << r.output;
      EXPECT_NE(r.output.find(c.value), std::string::npos) << r.output;
      EXPECT_EQ(r.output.find("\nepoch "), std::string::npos) << r.output;
    }
  }
}

// Through the C++ API, a value set in TrainOptions is used or refused, never swapped for the
// model's default: "not set" is an empty optional, not -1.
TEST_F(ModelFileDefaults, TrainOptionsOutOfRangeAreErrors) {
  auto error_with = [&](auto set) {
    freight::TrainOptions o;
    o.model = model(R"("batch_size": 8)");
    o.device = "cpu";
    o.epochs = 1;
    set(o);
    return freight::test::error_of([&] { freight::train(o); });
  };
  using O = freight::TrainOptions;
  EXPECT_TRUE(freight::test::has(error_with([](O& o) { o.lr = -1; }), "lr"));
  EXPECT_TRUE(freight::test::has(error_with([](O& o) { o.lr = std::nan(""); }), "nan"));
  EXPECT_TRUE(freight::test::has(error_with([](O& o) { o.batch_size = -1; }), "batch-size"));
  EXPECT_TRUE(freight::test::has(error_with([](O& o) { o.epochs = -1; }), "epochs"));
  EXPECT_TRUE(freight::test::has(error_with([](O& o) { o.momentum = -1; }), "momentum"));
  EXPECT_TRUE(freight::test::has(error_with([](O& o) { o.weight_decay = -1; }), "weight-decay"));
  EXPECT_TRUE(
      freight::test::has(error_with([](O& o) { o.test_batch_size = 0; }), "test-batch-size"));
  EXPECT_TRUE(freight::test::has(error_with([](O& o) { o.threads = -3; }), "threads"));
  EXPECT_TRUE(freight::test::has(error_with([](O& o) { o.limit_train = -5; }), "limit-train"));
  EXPECT_TRUE(freight::test::has(error_with([](O& o) { o.log_interval = -1; }), "log-interval"));
  // Unset options take the model's defaults (batch_size 8 here) and train.
  EXPECT_EQ(error_with([](O& o) { o.limit_train = 16; }), "");
}

}  // namespace
