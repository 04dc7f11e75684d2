// The data-parallel command end to end: `mpirun -np 2 freight train` against one process,
// checkpoints across rank counts, `--nproc`, and faults (a killed, a stopped and a failing rank
// end the job quickly with a message; different models are named). ctest gives these tests
// both cores and the environment mpirun needs as root (tests/CMakeLists.txt).
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <regex>
#include <string>

#include "common/test_util.h"
#include "freight/freight.h"

namespace freight {
namespace {

namespace fs = std::filesystem;
using test::has;
using test::shell;

const std::string kCli = FREIGHT_CLI_PATH;
const std::string kMpirun = FREIGHT_MPIRUN;

bool have_fashion_mnist() {
  return shell(kCli + " train --model mlp --epochs 1 --limit-train 64 --limit-test 64 --no-save")
             .status == 0;
}

class DistCli : public ::testing::Test {
 protected:
  // What mpirun needs here whoever runs the tests: root in a container is allowed, 3 ranks on 2
  // cores are allowed, one thread per rank, and a short collective timeout.
  static void SetUpTestSuite() {
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
    ::setenv("OMPI_MCA_rmaps_base_oversubscribe", "1", 0);
    ::setenv("OMP_NUM_THREADS", "1", 0);
    ::setenv("FREIGHT_DIST_TIMEOUT", "60", 0);
  }
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("freight_dist_cli_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }
  static std::string mpirun(int np) {
    return kMpirun + " -np " + std::to_string(np) + " --bind-to none " + kCli;
  }
  fs::path dir_;
};

double test_accuracy(const std::string& output) {
  std::smatch m;
  if (!std::regex_search(output, m, std::regex(R"(test accuracy ([0-9.]+)%)"))) return -1;
  return std::stod(m[1]);
}

// Two ranks reach one process's accuracy within 0.3 points. Not closer: the ranks sum their
// gradients in another order than one process, and training amplifies such rounding (one process
// with 1 or 2 threads differs by 0.8 points after 1 epoch of lenet5 here, 0.1 to 0.2 after 5), so
// the runs are long enough for the accuracy to settle. The job reports once: rank 0 prints.
TEST_F(DistCli, TwoRanksReachOneProcessAccuracy) {
  if (!have_fashion_mnist()) GTEST_SKIP() << "Fashion-MNIST is not installed";
  for (auto [model, epochs] : {std::pair<std::string, int>{"mlp", 3}, {"lenet5", 5}}) {
    std::string args = " train --model " + model + " --epochs " + std::to_string(epochs) +
                       " --no-save --log-interval 300";
    test::ShellRun one = shell(kCli + args + " --threads 1");
    test::ShellRun two = shell(mpirun(2) + args);
    ASSERT_EQ(one.status, 0) << one.output;
    ASSERT_EQ(two.status, 0) << two.output;
    double a1 = test_accuracy(one.output), a2 = test_accuracy(two.output);
    EXPECT_GT(a1, 85) << one.output;
    EXPECT_NEAR(a2, a1, 0.3) << model << "\n" << one.output << "\n" << two.output;
    EXPECT_TRUE(has(two.output,
                    "data parallel: 2 ranks on 1 host (MPI); global batch 64 = 32 "
                    "per rank"))
        << two.output;
    auto count = [](const std::string& s, const std::string& part) {
      size_t n = 0;
      for (size_t at = s.find(part); at != std::string::npos; at = s.find(part, at + 1)) ++n;
      return n;
    };
    EXPECT_EQ(count(two.output, "test accuracy"), 1u) << two.output;
    EXPECT_EQ(count(two.output, "train loss"), size_t(epochs)) << two.output;
    EXPECT_EQ(count(two.output, "model " + model), 1u) << two.output;
  }
}

// A checkpoint written by 2 ranks resumes in 1 process, and one written by 1 process resumes on
// 2 ranks; the metrics file is written once per epoch.
TEST_F(DistCli, CheckpointsResumeOnAnotherNumberOfRanks) {
  std::string args =
      " train --model lenet5 --data synthetic --limit-train 512 --limit-test 128 "
      "--batch-size 64 --log-interval 100";
  test::ShellRun a = shell(mpirun(2) + args + " --epochs 1 --save " + file("a.safetensors") +
                           " --metrics " + file("a.jsonl"));
  ASSERT_EQ(a.status, 0) << a.output;
  test::ShellRun a2 = shell(kCli + " train --resume " + file("a.safetensors") + " --epochs 2");
  ASSERT_EQ(a2.status, 0) << a2.output;
  EXPECT_TRUE(has(a2.output, "resuming")) << a2.output;
  EXPECT_TRUE(has(a2.output, "after epoch 2")) << a2.output;

  test::ShellRun b = shell(kCli + args + " --epochs 1 --save " + file("b.safetensors"));
  ASSERT_EQ(b.status, 0) << b.output;
  test::ShellRun b2 = shell(mpirun(2) + " train --resume " + file("b.safetensors") +
                            " --epochs 2 --metrics " + file("a.jsonl"));
  ASSERT_EQ(b2.status, 0) << b2.output;
  EXPECT_TRUE(has(b2.output, "after epoch 2")) << b2.output;
  test::ShellRun lines = shell("wc -l < " + file("a.jsonl"));
  EXPECT_EQ(std::stoi(lines.output), 2) << "one metrics line per epoch, from rank 0 only";
  test::ShellRun ranks = shell("grep -c '\"ranks\":2' " + file("a.jsonl"));
  EXPECT_EQ(std::stoi(ranks.output), 2);
}

TEST_F(DistCli, NprocStartsMpirunItself) {
  test::ShellRun r = shell("FREIGHT_MPIRUN=" + kMpirun + " " + kCli +
                           " train --nproc 2 --model mlp --data synthetic --limit-train 256 "
                           "--limit-test 64 --epochs 1 --no-save");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(has(r.output, "freight: starting 2 ranks: " + kMpirun + " -np 2")) << r.output;
  EXPECT_TRUE(has(r.output, "data parallel: 2 ranks")) << r.output;
  // Under mpirun, --nproc must agree with it.
  test::ShellRun bad = shell(mpirun(2) +
                             " train --nproc 3 --model mlp --data synthetic "
                             "--limit-train 64 --epochs 1 --no-save");
  EXPECT_NE(bad.status, 0);
  EXPECT_TRUE(has(bad.output, "--nproc 3 under mpirun with 2 processes")) << bad.output;
}

// freight bench --nproc 1,2: one process and two ranks train the same epochs, and the table
// gives each one's steps/s, the ratio to one process and the plan's prediction (or why not).
TEST_F(DistCli, BenchNprocTablesStepsPerSecondPerRankCount) {
  test::ShellRun r = shell("FREIGHT_MPIRUN=" + kMpirun + " " + kCli +
                           " bench --models mlp --batch-sizes 64 --threads all --quick "
                           "--no-plots --nproc 1,2 --out " +
                           dir_.string() + " --name b");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(has(r.output, "## Data parallel on this host's CPU (`--nproc`)")) << r.output;
  for (int ranks : {1, 2}) {
    std::smatch m;
    const std::string row = R"(\| mlp \| 64 \| )" + std::to_string(ranks) +
                            R"( \| ([0-9.]+) \| ([0-9.]+)x \| ([0-9.]+|-) \| ([0-9.]+x|-) \|)";
    ASSERT_TRUE(std::regex_search(r.output, m, std::regex(row))) << ranks << "\n" << r.output;
    EXPECT_GT(std::stod(m[1]), 0);
    if (ranks == 1) {
      EXPECT_EQ(m[2], "1.00");
    }
    // A prediction, or the reason there is none (no measured link between ranks).
    if (m[3] == "-") {
      EXPECT_TRUE(has(r.output, "plan: ")) << r.output;
    }
  }
  test::ShellRun json = shell("grep -c '\"steps_per_second\"' " + file("b.json"));
  EXPECT_EQ(json.output, "2\n");
}

// freight plan --ranks 2 predicts the measured 2-rank training: the link measured by devices
// --measure --nproc 2, then bench --nproc 2 on mlp (the gradient's sum is a third of the step),
// within 1.5x, and mnist-cnn (convolutions on a shard of 32 samples per rank), within 2x: CI's
// machine of 2026-12-07 measured it at 0.59x and 0.66x of the plan, twice in a row. Not lenet5:
// the one-process plan already under-predicts its small convolutions (PlanVsMeasured's 2x case);
// not lstm-rows: its many tiny ops make the two ranks wait on each other's every hiccup on a
// shared machine (0.65x to 1.06x of the plan from run to run). A shared machine has slower and
// faster phases: a model outside the bounds is measured again, and fails only when it misses
// twice.
TEST_F(DistCli, PlanForTwoRanksIsWithinItsToleranceOfTheMeasurement) {
  const std::string env =
      "FREIGHT_PEAKS_FILE=" + file("peaks.json") + " FREIGHT_MPIRUN=" + kMpirun + " ";
  test::ShellRun link = shell(env + kCli + " devices --measure --nproc 2");
  ASSERT_EQ(link.status, 0) << link.output;
  for (const auto& [model, tolerance] :
       {std::pair<std::string, double>{"mlp", 1.5}, {"mnist-cnn", 2.0}}) {
    double ratio = 0;
    for (int attempt = 1; attempt <= 2; ++attempt) {
      test::ShellRun r = shell(env + kCli + " bench --models " + model +
                               " --batch-sizes 64 --threads all --quick --seconds 1 "
                               "--no-plots --nproc 2 "
                               "--out " +
                               dir_.string() + " --name " + model);
      ASSERT_EQ(r.status, 0) << r.output;
      std::smatch m;
      const std::string row =
          R"(\| )" + model + R"( \| 64 \| 2 \| [0-9.]+ \| [0-9.]+x \| [0-9.]+ \| ([0-9.]+)x \|)";
      ASSERT_TRUE(std::regex_search(r.output, m, std::regex(row))) << r.output;
      ratio = std::stod(m[1]);
      std::printf("  %s at batch 64 on 2 ranks: measured/plan %.2fx%s\n", model.c_str(), ratio,
                  attempt == 2 ? " (second attempt)" : "");
      if (ratio > 1 / tolerance && ratio < tolerance) break;
    }
    EXPECT_GT(ratio, 1 / tolerance) << model;
    EXPECT_LT(ratio, tolerance) << model;
  }
}

// The link can be the first thing measured on a machine: the cache's folder is created for it.
TEST_F(DistCli, MeasuringTheLinkFirstCreatesThePeaksCache) {
  const std::string cache = file("fresh/folders/peaks.json");
  test::ShellRun r = shell("FREIGHT_PEAKS_FILE=" + cache + " FREIGHT_MPIRUN=" + kMpirun + " " +
                           kCli + " devices --measure --nproc 2");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(has(r.output, "all-reduce over MPI, host memory")) << r.output;
  EXPECT_TRUE(has(r.output, "saved for freight plan --ranks 2")) << r.output;
  EXPECT_TRUE(fs::exists(cache));
}

TEST_F(DistCli, GlobalBatchBelowTheRanksIsRefused) {
  test::ShellRun r = shell(mpirun(3) +
                           " train --model mlp --data synthetic --limit-train 64 "
                           "--epochs 1 --no-save --batch-size 2");
  EXPECT_NE(r.status, 0);
  EXPECT_TRUE(has(r.output, "--batch-size 2 is the global batch, split over 3 ranks")) << r.output;
}

TEST_F(DistCli, OtherCommandsUnderMpirunAreRefused) {
  test::ShellRun r = shell(mpirun(2) + " summary --model mlp");
  EXPECT_NE(r.status, 0);
  EXPECT_TRUE(has(r.output, "`freight summary` runs in one process: run it without mpirun"))
      << r.output;
}

// Rank 1 cannot read its data: the job ends at once, with rank 1's message.
TEST_F(DistCli, AnErrorOnOneRankEndsTheJobWithItsMessage) {
  std::string common = " train --model mlp --epochs 1 --no-save --limit-train 256 --limit-test 64";
  auto t0 = std::chrono::steady_clock::now();
  test::ShellRun r =
      shell(kMpirun + " --bind-to none -np 1 " + kCli + common + " --data synthetic : -np 1 " +
            kCli + common + " --data " + file("no-such-dir"));
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(r.status, 0);
  EXPECT_TRUE(has(r.output, "freight: error on rank 1 of 2")) << r.output;
  EXPECT_TRUE(has(r.output, "no-such-dir")) << r.output;
  EXPECT_LT(s, 20) << r.output;
}

TEST_F(DistCli, DifferentModelsOnTheRanksAreNamed) {
  std::string common = " train --data synthetic --epochs 1 --no-save --limit-train 256";
  test::ShellRun r = shell(kMpirun + " --bind-to none -np 1 " + kCli + common +
                           " --model mlp : -np 1 " + kCli + common + " --model lenet5");
  EXPECT_NE(r.status, 0);
  EXPECT_TRUE(has(r.output, "rank 1 built a different model than rank 0")) << r.output;
}

// A rank killed (SIGKILL: no handler runs) or stopped (SIGSTOP: it holds its collectives) in the
// middle of training: the job ends with a message well within 10 s, never hangs.
void fault_ends_the_job(const std::string& signal, const std::string& log, const std::string& env,
                        const std::string& want) {
  std::string script =
      env + " " + kMpirun + " -np 2 --bind-to none " + kCli +
      " train --model mlp --data synthetic --epochs 100 --no-save --log-interval 1 > " + log +
      " 2>&1 & mp=$!\n"
      "for i in $(seq 600); do grep -q ' batch ' " +
      log +
      " && break; sleep 0.05; done\n"
      "victim=''; for p in /proc/[0-9]*; do\n"
      "  [ \"$(cut -d' ' -f4 $p/stat 2>/dev/null)\" = \"$mp\" ] && victim=${p#/proc/}; done\n"
      "[ -n \"$victim\" ] || { echo 'no rank found'; kill $mp; exit 99; }\n"
      "t0=$(date +%s.%N); kill -" +
      signal +
      " $victim; wait $mp; rc=$?; t1=$(date +%s.%N)\n"
      "kill -9 $victim 2>/dev/null\n"
      "echo \"rc=$rc seconds=$(awk \"BEGIN{print $t1 - $t0}\")\"; cat " +
      log + "\n";
  std::string path = log + ".sh";
  FILE* f = std::fopen(path.c_str(), "w");
  ASSERT_TRUE(f);
  std::fputs(script.c_str(), f);
  std::fclose(f);
  test::ShellRun r = shell("bash " + path);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m, std::regex(R"(rc=(\d+) seconds=([0-9.]+))")))
      << r.output;
  EXPECT_NE(std::stoi(m[1]), 0) << r.output;
  EXPECT_LT(std::stod(m[2]), 10.0) << r.output;
  EXPECT_TRUE(has(r.output, want)) << r.output;
}

TEST_F(DistCli, AKilledRankEndsTheJobWithin10Seconds) {
  fault_ends_the_job("KILL", file("kill.log"), "", "signal 9");
}

TEST_F(DistCli, AStoppedRankTimesOutNamingTheCollective) {
  fault_ends_the_job("STOP", file("stop.log"), "FREIGHT_DIST_TIMEOUT=3",
                     "waited 3 s for the other ranks: a rank is stuck or died");
}

}  // namespace
}  // namespace freight
