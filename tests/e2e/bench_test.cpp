// `freight bench --quick` on one tiny model and batch: the Markdown table, the JSON records with
// their documented fields, and the plots; beside PyTorch when /usr/bin/python3 has torch.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "common/test_util.h"
#include "freight/device.h"
#include "freight/peaks.h"
#include "freight/runtime.h"

namespace {

namespace fs = std::filesystem;
using freight::test::shell;
using freight::test::ShellRun;

bool torch_available() {
  return shell("/usr/bin/python3 -c 'import torch'").status == 0;
}

class Bench : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("freight_bench_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

void expect_fields(const nlohmann::json& j, const std::vector<const char*>& keys,
                   const std::string& what) {
  for (const char* k : keys)
    EXPECT_TRUE(j.contains(k)) << what << " has no '" << k << "':\n" << j.dump(1);
}

// A peaks cache with a round 100 GFLOP/s for the CPU with 1 and with all threads, under the keys
// the bench process will look up (it runs without OPENBLAS_CORETYPE), so that it measures
// nothing and the fraction of peak is checkable.
std::string seed_peaks(const fs::path& dir) {
  ::unsetenv("OPENBLAS_CORETYPE");
  std::string path = (dir / "peaks.json").string();
  int previous = freight::num_threads();
  for (int t : {1, int(std::max(1u, std::thread::hardware_concurrency()))}) {
    freight::set_num_threads(t);
    freight::DevicePeaks p;
    p.device = freight::Device::cpu();
    p.key = freight::peaks_key(p.device);
    p.threads = t;
    p.fp32_flops = 100e9;
    p.gemm_n = 2048;
    p.measured_at = "2000-01-01T00:00:00Z";
    freight::save_peaks(p, path);
  }
  freight::set_num_threads(previous);
  return path;
}

TEST_F(Bench, QuickRunWritesTableJsonAndPlots) {
  bool torch = torch_available();
  std::string cmd = "FREIGHT_PEAKS_FILE=" + seed_peaks(dir_) + " " + std::string(FREIGHT_CLI_PATH) +
                    " bench --quick --models mlp --batch-sizes 8 --threads 1,all --devices "
                    "cpu,cuda --seconds 0.05 --out " +
                    dir_.string() + (torch ? " --vs pytorch" : "");
  ShellRun r = shell(cmd);
  ASSERT_EQ(r.status, 0) << cmd << "\n" << r.output;
  EXPECT_NE(r.output.find("| mlp | 8 | cpu |"), std::string::npos) << r.output;

  ASSERT_TRUE(fs::exists(dir_ / "bench.md"));
  std::ifstream md(dir_ / "bench.md");
  std::stringstream mds;
  mds << md.rdbuf();
  EXPECT_NE(mds.str().find("## Training steps"), std::string::npos) << mds.str();

  ASSERT_TRUE(fs::exists(dir_ / "bench.json"));
  std::ifstream jf(dir_ / "bench.json");
  nlohmann::json doc = nlohmann::json::parse(jf);
  expect_fields(doc,
                {"schema", "freight", "started_at", "load_average", "settings", "devices",
                 "flops_convention", "notes", "rows"},
                "the document");
  expect_fields(doc["freight"], {"version", "build"}, "freight");
  expect_fields(doc["devices"][0], {"device", "name", "description"}, "devices[0]");
  ASSERT_GE(doc["rows"].size(), 1u);
  bool all_threads_row = false;
  for (const auto& row : doc["rows"]) {
    expect_fields(row,
                  {"framework", "version", "build", "model", "batch_size", "precision", "device",
                   "device_name", "device_description", "threads", "status"},
                  "a row");
    ASSERT_EQ(row["status"], "ok") << row.dump(1);
    expect_fields(row,
                  {"median_ms", "min_ms", "max_ms", "rounds", "steps_per_round", "samples_per_s",
                   "latency_ms", "forward_flops", "step_flops", "gflops", "peak_memory_bytes"},
                  "a measured row");
    EXPECT_EQ(row["model"], "mlp");
    EXPECT_EQ(row["batch_size"], 8);
    EXPECT_EQ(row["precision"], "fp32");
    EXPECT_GE(row["rounds"].get<int>(), 3);
    EXPECT_LE(row["min_ms"].get<double>(), row["median_ms"].get<double>());
    EXPECT_LE(row["median_ms"].get<double>(), row["max_ms"].get<double>());
    EXPECT_GT(row["peak_memory_bytes"].get<double>(), 0);
    // mlp: 784-512-256-10, 2 FLOPs a multiply-add, 8 samples; a layer's step is 3 products
    // (forward, dW, dX), except the first layer's: its input is the data, which needs no dX.
    EXPECT_NEAR(row["step_flops"].get<double>(),
                8 * 2 * (2.0 * 784 * 512 + 3.0 * (512 * 256 + 256 * 10)),
                0.02 * row["step_flops"].get<double>());
    if (row["device"] == "cpu" && row["threads"].get<int>() > 1) all_threads_row = true;
    if (torch) {
      ASSERT_TRUE(row.contains("pytorch")) << row.dump(1);
      expect_fields(row["pytorch"],
                    {"status", "config", "median_ms", "latency_ms", "freight_over_pytorch",
                     "speedup", "tried", "peak_memory_bytes"},
                    "a row's pytorch");
      // PyTorch's own peak, measured in its worker: at least mlp's weights (535 K floats).
      EXPECT_GT(row["pytorch"].value("peak_memory_bytes", 0.0), 4.0 * 535000) << row.dump(1);
    }
  }
  bool gnuplot = shell("command -v gnuplot").status == 0;
  if (gnuplot && (torch || all_threads_row)) {
    for (const char* f : {"bench-speedup.png", "bench-speedup.svg", "bench-throughput-latency.png",
                          "bench-throughput-latency.svg"}) {
      EXPECT_TRUE(fs::exists(dir_ / f)) << f << "\n" << r.output;
      if (fs::exists(dir_ / f)) {
        EXPECT_GT(fs::file_size(dir_ / f), 1000u) << f;
      }
    }
  }
}

TEST_F(Bench, PytorchCompileWithoutVsPytorchIsAnError) {
  ShellRun r = shell(std::string(FREIGHT_CLI_PATH) +
                     " bench --quick --models mlp --pytorch-compile --out " + dir_.string());
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("--pytorch-compile"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--vs pytorch"), std::string::npos) << r.output;
}

// Of several Pythons given to --python, one that is missing is a note; the others still run,
// and each configuration names its PyTorch's version.
TEST_F(Bench, AMissingPythonInTheListIsANoteAndTheOthersRun) {
  if (!torch_available()) GTEST_SKIP() << "Debian's python3-torch is not installed";
  const std::string missing = (dir_ / "no-such-python").string();
  std::string cmd = "FREIGHT_PEAKS_FILE=" + seed_peaks(dir_) + " " + std::string(FREIGHT_CLI_PATH) +
                    " bench --quick --models mlp --batch-sizes 8 --threads all --devices cpu "
                    "--seconds 0.05 --no-plots --vs pytorch --python " +
                    missing + ",/usr/bin/python3 --out " + dir_.string();
  ShellRun r = shell(cmd);
  ASSERT_EQ(r.status, 0) << cmd << "\n" << r.output;
  std::ifstream jf(dir_ / "bench.json");
  nlohmann::json doc = nlohmann::json::parse(jf);
  bool noted = false;
  for (const auto& n : doc["notes"])
    noted |=
        n.get<std::string>().find(missing + " is not an executable Python") != std::string::npos;
  EXPECT_TRUE(noted) << doc["notes"].dump(1);
  ASSERT_EQ(doc["rows"].size(), 1u);
  const auto& pt = doc["rows"][0]["pytorch"];
  ASSERT_EQ(pt.value("status", ""), "ok") << pt.dump(1);
  EXPECT_NE(pt.value("config", "").find("torch "), std::string::npos) << pt.dump(1);
}

// Only GPUs asked for, and none here: an error saying why, not an empty report with status 0.
TEST_F(Bench, OnlyAbsentGpusIsAnErrorSayingWhy) {
  if (freight::cuda_available()) GTEST_SKIP() << "a GPU is present: the GPU rows would run";
  ShellRun r = shell(std::string(FREIGHT_CLI_PATH) +
                     " bench --models mlp --batch-sizes 8 --devices cuda --out " + dir_.string());
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("nothing to time"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--devices cuda"), std::string::npos) << r.output;
}

// An empty list is a mistake in a script, not a request for the default (every model, for
// tens of minutes).
TEST_F(Bench, EmptyListsAreErrors) {
  for (const char* flag : {"--models", "--batch-sizes", "--threads"}) {
    ShellRun r =
        shell(std::string(FREIGHT_CLI_PATH) + " bench " + flag + " '' --out " + dir_.string());
    EXPECT_EQ(r.status, 1) << flag << "\n" << r.output;
    EXPECT_NE(r.output.find(std::string(flag) + ": the list is empty"), std::string::npos)
        << r.output;
  }
}

TEST_F(Bench, UnknownModelIsAnError) {
  ShellRun r =
      shell(std::string(FREIGHT_CLI_PATH) + " bench --models nosuchnet --out " + dir_.string());
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("nosuchnet"), std::string::npos) << r.output;
}

}  // namespace
