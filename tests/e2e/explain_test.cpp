// freight explain: the breakdown of a training step attributes at least 95% of the step to layers
// and phases, with FLOPs, bytes and roofline bounds where they are known; its step time and its
// per-layer attribution agree with what the test measures itself through the public API
// (tests/timing/explain_attribution_test.cpp, run alone on the machine); the command prints the
// table and writes the roofline plot; a GPU requested where there is none is a clear error.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "common/array_files.h"
#include "common/test_util.h"
#include "freight/error.h"
#include "freight/explain.h"
#include "freight/runtime.h"

namespace freight {
namespace {

namespace fs = std::filesystem;

// A private peaks cache for the suite, measured once (the command run by the tests reads it).
class Explain : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    peaks_file_ = new test::ScopedPeaksFile("explain_test");
    measure_peaks(Device::cpu());
  }
  static void TearDownTestSuite() { delete peaks_file_; }
  static fs::path dir() { return peaks_file_->dir(); }
  static ExplainOptions quick(const std::string& model) {
    ExplainOptions o;
    o.model = model;
    o.device = "cpu";
    o.warmup = 1;
    o.min_steps = 3;
    o.min_seconds = 0.05;
    o.max_steps = 6;
    return o;
  }
  static test::ScopedPeaksFile* peaks_file_;
};
test::ScopedPeaksFile* Explain::peaks_file_ = nullptr;

// The shape of a breakdown. (That the rows add up to the step is true by construction: "other"
// is what the rest leave. Whether the times are right is checked against the test's own
// measurements in tests/timing/explain_attribution_test.cpp.)
void check_breakdown(const ExplainResult& r) {
  EXPECT_GT(r.step_s, 0);
  EXPECT_GE(r.attributed, 0.95);
  std::set<std::string> kinds;
  for (const ExplainRow& row : r.rows) {
    kinds.insert(row.kind);
    EXPECT_GE(row.fwd_s, 0) << row.name;
    EXPECT_GE(row.bwd_s, 0) << row.name;
  }
  for (const char* k : {"layer", "loss", "engine", "optimizer", "copy", "sync", "other"})
    EXPECT_TRUE(kinds.count(k)) << "no row of kind " << k;
}

TEST_F(Explain, ZooModelsAttributeTheStepToTheirLayers) {
  ExplainResult r = explain(quick("mlp"));
  check_breakdown(r);
  EXPECT_EQ(r.model, "mlp");
  EXPECT_TRUE(r.device.is_cpu());
  EXPECT_EQ(r.batch_size, 64);
  int linear = 0;
  for (const ExplainRow& row : r.rows) {
    if (row.describe.rfind("Linear(", 0) != 0) continue;
    ++linear;
    EXPECT_GT(row.flops, 0);
    EXPECT_GT(row.bytes, 0);
    EXPECT_GT(row.fwd_s, 0);
    EXPECT_GT(row.bwd_s, 0);
    EXPECT_GT(row.intensity(), 1);  // a GEMM reuses its operands
    double roof = roofline_rate(row, r.peaks);
    EXPECT_GT(roof, 0);
    EXPECT_LE(roof, r.peaks.fp32_flops * (1 + 1e-9));
    EXPECT_NE(bound_by(row, r.peaks), "-");
  }
  EXPECT_EQ(linear, 3);
  // Linear(784, 512) at batch 64: 2·64·784·512 forward and as much backward for dW, plus the
  // bias; no dX, since its input is the data. The next Linear computes its dX too.
  const ExplainRow& first = r.rows[1];
  ASSERT_EQ(first.describe, "Linear(784, 512)");
  EXPECT_NEAR(first.flops, 2.0 * 2 * 64 * 784 * 512, 0.01 * first.flops);
  const ExplainRow& second = r.rows[3];
  ASSERT_EQ(second.describe, "Linear(512, 256)");
  EXPECT_NEAR(second.flops, 3.0 * 2 * 64 * 512 * 256, 0.01 * second.flops);

  // Convolutional and recurrent models too. (One test, so ctest's one process per test measures
  // the suite's peaks once for all of these.)
  for (const char* m : {"lenet5", "lstm-rows"}) {
    SCOPED_TRACE(m);
    ExplainResult r = explain(quick(m));
    check_breakdown(r);
    double layer_flops = 0;
    for (const ExplainRow& row : r.rows)
      if (row.kind == "layer") layer_flops += row.flops;
    EXPECT_GT(layer_flops, 1e6);
  }
}

// --data: the dataset's load and the loader's time per batch, beside the step; a dataset that
// cannot be read is the same error as train's.
TEST_F(Explain, DataCostIsMeasuredBesideTheStep) {
  const int64_t n = 200;
  std::vector<float> x(size_t(n * 784));
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(i % 97) / 97.0f;
  std::vector<int64_t> y(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) y[size_t(i)] = i % 10;
  const fs::path xs = dir() / "x.npy", ys = dir() / "y.npy";
  std::ofstream(xs, std::ios::binary) << test::npy_of("<f4", {n, 1, 28, 28}, x);
  std::ofstream(ys, std::ios::binary) << test::npy_of("<i8", {n}, y);
  ExplainOptions o = quick("mlp");
  o.data = xs.string() + "," + ys.string();
  ExplainResult r = explain(o);
  check_breakdown(r);
  ASSERT_TRUE(r.data.has_value());
  EXPECT_EQ(r.data->data, o.data);
  EXPECT_EQ(r.data->samples, n);
  EXPECT_EQ(r.data->batches_timed, 4);  // 200 samples in batches of 64
  EXPECT_GT(r.data->batch_s, 0);
  EXPECT_GE(r.data->load_s, 0);
  EXPECT_FALSE(explain(quick("mlp")).data.has_value());  // none named, none measured

  o.data = (dir() / "missing.npz").string();
  EXPECT_THROW(
      {
        try {
          explain(o);
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("missing.npz"), std::string::npos) << e.what();
          throw;
        }
      },
      Error);
}

TEST(ExplainDevice, CudaWithoutAGpuIsAnError) {
  if (!list_devices().empty() && list_devices().back().device.is_cuda())
    GTEST_SKIP() << "a GPU is present";
  ExplainOptions o;
  o.model = "mlp";
  o.device = "cuda";
  try {
    explain(o);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("GPU"), std::string::npos) << e.what();
  }
}

// A layer faster than the GEMM peak gets a note naming it and why (its FLOPs are direct sums);
// the phases, rows without FLOPs and a memory-bound row past its bandwidth roof never count, and
// without such a layer there is no note.
TEST(ExplainNote, LayersFasterThanTheGemmPeakAreNamedWithTheReason) {
  ExplainResult r;
  r.peaks.fp32_flops = 100e9;
  r.peaks.mem_bandwidth = 10e9;
  auto layer = [](std::string name, std::string kind, double flops, double seconds) {
    ExplainRow row;
    row.name = std::move(name), row.describe = "Conv2d(64, 64, kernel=3)", row.kind = kind;
    row.flops = flops, row.fwd_s = seconds;  // bytes 0: the compute roof, 100 GFLOP/s
    return row;
  };
  ExplainRow cached = layer("6", "layer", 20e9, 1);  // 100 GB in 1 s: past a 10 GB/s roof
  cached.bytes = 100e9;
  ASSERT_GT(cached.rate(), roofline_rate(cached, r.peaks));
  r.rows = {layer("1", "layer", 50e9, 1), layer("2", "layer", 90e9, 1),
            layer("optimizer", "optimizer", 500e9, 1), layer("3", "layer", 0, 1), cached};
  EXPECT_EQ(beyond_roof_note(r), "");
  r.rows.push_back(layer("4", "layer", 120e9, 1));
  r.rows.push_back(layer("5", "layer", 205e9, 1));
  const std::string note = beyond_roof_note(r);
  for (const char* s : {"2 layers run faster than the GEMM peak", "up to 205%", "layer 5",
                        "direct sums", "Winograd"})
    EXPECT_NE(note.find(s), std::string::npos) << "missing '" << s << "' in: " << note;
}

TEST_F(Explain, CommandPrintsTheTableAndWritesThePlot) {
  fs::path prefix = dir() / "plots" / "mlp";
  fs::path json = dir() / "mlp.json";
  test::ShellRun run =
      test::shell(fmt::format("{} explain --model mlp --steps 2 --warmup 1 --plot {} --json {}",
                              FREIGHT_CLI_PATH, prefix.string(), json.string()));
  std::string out = run.output;
  ASSERT_EQ(run.status, 0) << out;
  for (const char* s : {"explain mlp on cpu", "fwd ms", "FLOP/B", "%roof", "Linear(784, 512)",
                        "optimizer", "host-to-device copy", "autograd engine", "attributed "})
    EXPECT_NE(out.find(s), std::string::npos) << "missing '" << s << "' in:\n" << out;
  EXPECT_TRUE(fs::exists(prefix.string() + ".gp"));
  EXPECT_TRUE(fs::exists(prefix.string() + ".dat"));
  if (test::shell("command -v gnuplot").status == 0) {
    EXPECT_GT(fs::file_size(prefix.string() + ".png"), 1000u);
    EXPECT_GT(fs::file_size(prefix.string() + ".svg"), 1000u);
  }
  std::ifstream f(json);
  nlohmann::json j = nlohmann::json::parse(f);
  EXPECT_GE(j.at("attributed").get<double>(), 0.95);
  EXPECT_FALSE(j.at("rows").empty());

  // A GPU asked for as the second device, with none present, fails before any output.
  if (list_devices().back().device.is_cuda()) return;
  run =
      test::shell(fmt::format("{} explain --model mlp --device2 cuda --no-plot", FREIGHT_CLI_PATH));
  out = run.output;
  EXPECT_NE(run.status, 0) << out;
  EXPECT_NE(out.find("no usable GPU"), std::string::npos) << out;
  EXPECT_EQ(out.find("attributed"), std::string::npos) << out;
}

}  // namespace
}  // namespace freight
