// The `freight` command as a user runs it: bad input gives a clear message on stderr and a
// non-zero exit, never a crash; good input trains, saves, evaluates.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "common/test_util.h"
#include "freight/device.h"

namespace {

namespace fs = std::filesystem;

using CliRun = freight::test::ShellRun;

CliRun freight_cli(const std::string& args) {
  return freight::test::shell(std::string(FREIGHT_CLI_PATH) + " " + args);
}

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("freight_cli_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& n) { return (dir_ / n).string(); }
  // Expects exit status 1 (a freight::Error) and every fragment in the message.
  void expect_failure(const std::string& args, const std::vector<std::string>& fragments) {
    CliRun r = freight_cli(args);
    EXPECT_EQ(r.status, 1) << args << "\n" << r.output;
    EXPECT_NE(r.output.find("freight: error:"), std::string::npos) << r.output;
    for (const std::string& f : fragments)
      EXPECT_NE(r.output.find(f), std::string::npos) << "missing '" << f << "' in:\n" << r.output;
  }
  fs::path dir_;
};

TEST_F(Cli, UnknownModelNamesItAndTheZoo) {
  expect_failure("train --model nosuchnet --no-save", {"nosuchnet", "mlp"});
}

TEST_F(Cli, BrokenDataNamesTheFile) {
  fs::create_directories(path("data"));
  std::ofstream(path("data/train-images-idx3-ubyte")) << "garbage!";
  std::ofstream(path("data/train-labels-idx1-ubyte")) << "garbage!";
  expect_failure("train --model mlp --no-save --data " + path("data"),
                 {"train-images-idx3-ubyte", "magic"});
}

TEST_F(Cli, BadFlagsAreErrors) {
  expect_failure("train --model mlp --no-save --batch-size 0", {"--batch-size"});
  expect_failure("train --model mlp --no-save --device tpu", {"tpu"});
  expect_failure("train --model mlp --no-save --optimizer rmsprop", {"rmsprop"});
  // Before mpirun starts (the output then holds no "starting 3 ranks" line).
  CliRun few = freight_cli("train --model mlp --no-save --nproc 3 --batch-size 2");
  EXPECT_NE(few.status, 0) << few.output;
  EXPECT_NE(few.output.find("--batch-size 2 is the global batch, split over --nproc 3 ranks"),
            std::string::npos)
      << few.output;
  EXPECT_EQ(few.output.find("starting 3 ranks"), std::string::npos) << few.output;
  CliRun r = freight_cli("train --no-such-flag");
  EXPECT_NE(r.status, 0);
  // --save with --no-save: which one wins is not guessed.
  r = freight_cli("train --model mlp --epochs 1 --limit-train 8 --save " + path("m.safetensors") +
                  " --no-save");
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_TRUE(r.output.find("--save excludes --no-save") != std::string::npos ||
              r.output.find("--no-save excludes --save") != std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(path("m.safetensors")));
}

TEST_F(Cli, CudaWithoutAGpuIsAnErrorNotAFallback) {
  if (freight::cuda_available()) GTEST_SKIP() << "a GPU is present";
  expect_failure("train --model mlp --no-save --device cuda", {"no usable GPU"});
}

TEST_F(Cli, MissingOrCorruptCheckpoint) {
  expect_failure("eval " + path("none.safetensors"), {"none.safetensors"});
  std::ofstream(path("bad.safetensors")) << "12345678{";
  expect_failure("eval " + path("bad.safetensors"), {"bad.safetensors"});
}

TEST_F(Cli, TrainsSavesAndEvaluatesOnSyntheticData) {
  std::string ckpt = path("m.safetensors");
  CliRun r = freight_cli("train --model mlp --data synthetic --epochs 1 --device cpu --save " +
                         ckpt + " --metrics " + path("metrics.jsonl"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("test accuracy"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::exists(ckpt));
  EXPECT_TRUE(fs::exists(ckpt + ".train"));
  std::ifstream m(path("metrics.jsonl"));
  std::string line;
  ASSERT_TRUE(std::getline(m, line));
  EXPECT_NE(line.find("\"test_accuracy\""), std::string::npos) << line;
  CliRun e = freight_cli("eval " + ckpt + " --data synthetic --device cpu");
  EXPECT_EQ(e.status, 0) << e.output;
  EXPECT_NE(e.output.find("accuracy"), std::string::npos) << e.output;
}

TEST_F(Cli, SummaryOfVgg16CountsItsParameters) {
  CliRun r = freight_cli("summary --model vgg16");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("138,357,544"), std::string::npos) << r.output;
}

TEST_F(Cli, DevicesListsTheCpu) {
  CliRun r = freight_cli("devices");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("cpu"), std::string::npos) << r.output;
}

// With two threads or more, `freight devices` says whether they share a cache now, and the reading
// behind the verdict.
TEST_F(Cli, DevicesSaysWhetherTheThreadsShareACache) {
  if (std::thread::hardware_concurrency() < 2) GTEST_SKIP() << "one hardware thread";
  CliRun r = freight_cli("devices");
  ASSERT_EQ(r.status, 0) << r.output;
  const bool shared = r.output.find(
                          "cache between threads: shared (a thread reads the other's "
                          "data at ") != std::string::npos;
  const bool apart = r.output.find(
                         "cache between threads: apart (a thread reads the other's "
                         "data at ") != std::string::npos;
  EXPECT_TRUE(shared != apart) << r.output;
  if (apart) EXPECT_NE(r.output.find("--threads 1"), std::string::npos) << r.output;
}

// `freight devices` says which CPU kernels run; FREIGHT_CPU_ISA picks them, and a level that is
// unknown, or that the CPU cannot run, is a clear error rather than a silent choice of another.
TEST_F(Cli, DevicesSaysWhichCpuKernelsRun) {
  CliRun r = freight_cli("devices");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("CPU kernels: "), std::string::npos) << r.output;
  if (r.output.find("CPU kernels: built-in") != std::string::npos) return;  // FREIGHT_NATIVE=ON

  CliRun bad =
      freight::test::shell("FREIGHT_CPU_ISA=sse9 " + std::string(FREIGHT_CLI_PATH) + " devices");
  EXPECT_NE(bad.status, 0) << bad.output;
  EXPECT_NE(bad.output.find("FREIGHT_CPU_ISA=sse9: this build has CPU kernels for "),
            std::string::npos)
      << bad.output;
#if defined(__x86_64__)
  CliRun avx2 =
      freight::test::shell("FREIGHT_CPU_ISA=avx2 " + std::string(FREIGHT_CLI_PATH) + " devices");
  ASSERT_EQ(avx2.status, 0) << avx2.output;
  EXPECT_NE(avx2.output.find("CPU kernels: avx2 (FREIGHT_CPU_ISA=avx2"), std::string::npos)
      << avx2.output;
  CliRun avx512 =
      freight::test::shell("FREIGHT_CPU_ISA=avx512 " + std::string(FREIGHT_CLI_PATH) + " devices");
  if (r.output.find("this CPU runs: avx2, avx512") != std::string::npos) {
    EXPECT_EQ(avx512.status, 0) << avx512.output;
  } else {
    EXPECT_NE(avx512.status, 0) << avx512.output;
    EXPECT_NE(avx512.output.find("this CPU cannot run the avx512 kernels"), std::string::npos)
        << avx512.output;
  }
#endif
}

}  // namespace
