// Device peaks: the cache round-trips every field, is keyed by device and build, rejects a
// corrupt file with a message naming it; a real CPU measurement gives sane figures.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "freight/error.h"
#include "freight/explain.h"
#include "freight/nn/layers.h"
#include "freight/peaks.h"
#include "freight/runtime.h"
#include "profile/peaks_device.h"

namespace freight {
namespace {

namespace fs = std::filesystem;

class Peaks : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("freight_peaks_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    file_ = (dir_ / "sub" / "peaks.json").string();
    const char* old = std::getenv("FREIGHT_PEAKS_FILE");
    had_ = old != nullptr;
    if (had_) old_ = old;
    ::setenv("FREIGHT_PEAKS_FILE", file_.c_str(), 1);
  }
  void TearDown() override {
    if (had_)
      ::setenv("FREIGHT_PEAKS_FILE", old_.c_str(), 1);
    else
      ::unsetenv("FREIGHT_PEAKS_FILE");
    fs::remove_all(dir_);
  }
  static DevicePeaks fake(const std::string& key) {
    DevicePeaks p;
    p.device = Device::cuda(1);
    p.name = "Fake GPU";
    p.build = "test build";
    p.key = key;
    p.measured_at = "2000-01-01T00:00:00Z";
    p.threads = 3;
    p.fp32_flops = 1.25e12;
    p.gemm_n = 4096;
    p.tf32_flops = 2.5e12;
    p.bf16_flops = 5e12;
    p.gemm_overhead_s = 4.5e-6;
    p.mem_bandwidth = 2e11;
    p.levels = {{2e7, 1e12}, {2e9, 2e11}};
    p.h2d_pinned = 2.1e10;
    p.h2d_pageable = 1.1e10;
    p.d2h_pinned = 2.2e10;
    p.d2h_pageable = 1.2e10;
    p.launch_s = 3e-6;
    p.op_s = 7e-6;
    p.train_op_s = 2e-5;
    p.spread = 0.03;
    p.load = 1.5;
    return p;
  }
  fs::path dir_;
  std::string file_, old_;
  bool had_ = false;
};

TEST_F(Peaks, CacheRoundTripsEveryField) {
  EXPECT_EQ(peaks_cache_path(), file_);
  DevicePeaks a = fake("key A"), b = fake("key B");
  b.fp32_flops = 9e9;
  save_peaks(a, file_);  // creates the directory
  save_peaks(b, file_);  // a second entry keeps the first
  DevicePeaks r;
  ASSERT_TRUE(load_peaks("key A", file_, r));
  EXPECT_TRUE(r.from_cache);
  EXPECT_EQ(r.key, "key A");
  EXPECT_EQ(r.device, Device::cuda(1));
  EXPECT_EQ(r.name, a.name);
  EXPECT_EQ(r.build, a.build);
  EXPECT_EQ(r.measured_at, a.measured_at);
  EXPECT_EQ(r.threads, a.threads);
  EXPECT_EQ(r.gemm_n, a.gemm_n);
  for (auto [got, want] : {std::pair{r.fp32_flops, a.fp32_flops},
                           {r.tf32_flops, a.tf32_flops},
                           {r.bf16_flops, a.bf16_flops},
                           {r.gemm_overhead_s, a.gemm_overhead_s},
                           {r.mem_bandwidth, a.mem_bandwidth},
                           {r.h2d_pinned, a.h2d_pinned},
                           {r.h2d_pageable, a.h2d_pageable},
                           {r.d2h_pinned, a.d2h_pinned},
                           {r.d2h_pageable, a.d2h_pageable},
                           {r.launch_s, a.launch_s},
                           {r.op_s, a.op_s},
                           {r.train_op_s, a.train_op_s},
                           {r.spread, a.spread},
                           {r.load, a.load}})
    EXPECT_DOUBLE_EQ(got, want);
  ASSERT_EQ(r.levels.size(), 2u);
  EXPECT_DOUBLE_EQ(r.levels[0].bytes, 2e7);
  EXPECT_DOUBLE_EQ(r.levels[0].bandwidth, 1e12);
  EXPECT_DOUBLE_EQ(r.levels[1].bandwidth, 2e11);
  ASSERT_TRUE(load_peaks("key B", file_, r));
  EXPECT_DOUBLE_EQ(r.fp32_flops, 9e9);
  EXPECT_FALSE(load_peaks("key C", file_, r));
  EXPECT_FALSE(load_peaks("key A", (dir_ / "none.json").string(), r));
}

TEST_F(Peaks, ParallelThresholdsRoundTripAndOldEntriesHaveNone) {
  DevicePeaks a = fake("with"), b = fake("without");
  a.parallel.conv_macs_per_thread = 166e3;
  a.parallel.gemm_macs_per_thread = 131072;
  a.parallel.elementwise_per_thread = 16384;
  a.parallel_measured = true;
  save_peaks(a, file_);
  save_peaks(b, file_);  // an entry written before the thresholds were measured
  DevicePeaks r;
  ASSERT_TRUE(load_peaks("with", file_, r));
  EXPECT_TRUE(r.parallel_measured);
  EXPECT_EQ(r.parallel, a.parallel);
  ASSERT_TRUE(load_peaks("without", file_, r));
  EXPECT_FALSE(r.parallel_measured);
  EXPECT_EQ(r.parallel, ParallelThresholds{});
}

TEST_F(Peaks, CachedParallelThresholdsAreAppliedOnlyWhenMeasured) {
  const ParallelThresholds saved = parallel_thresholds();
  DevicePeaks p = fake(peaks_key(Device::cpu()));
  p.device = Device::cpu();
  save_peaks(p, file_);
  EXPECT_FALSE(use_cached_parallel_thresholds());  // an entry without them
  EXPECT_EQ(parallel_thresholds(), saved);
  p.parallel.conv_macs_per_thread = 1234;
  p.parallel.gemm_macs_per_thread = 5678;
  p.parallel.elementwise_per_thread = 99;
  p.parallel_measured = true;
  save_peaks(p, file_);
  EXPECT_TRUE(use_cached_parallel_thresholds());
  EXPECT_EQ(parallel_thresholds(), p.parallel);
  // Measured while another process held a core: kept for the record, not put in force.
  set_parallel_thresholds(saved);
  p.parallel_contended = true;
  save_peaks(p, file_);
  EXPECT_FALSE(use_cached_parallel_thresholds());
  EXPECT_EQ(parallel_thresholds(), saved);
  DevicePeaks r;
  ASSERT_TRUE(load_peaks(p.key, file_, r));
  EXPECT_TRUE(r.parallel_contended);
  EXPECT_EQ(r.parallel, p.parallel);
  set_parallel_thresholds(saved);
}

TEST_F(Peaks, EachRungKeepsItsFastestRoundOfTheBestGrade) {
  // Round 1 ran while a neighbour held a core: its times are not the machine's.
  const std::vector<std::vector<double>> rounds = {{3, 9}, {1, 2}, {4, 7}};
  EXPECT_EQ(profile::fastest_rounds(rounds, {2, 0, 2}), (std::vector<double>{3, 7}));
  // One round alone does not decide: with one grade-2 round, the grade-1 round joins it.
  EXPECT_EQ(profile::fastest_rounds(rounds, {1, 0, 2}), (std::vector<double>{3, 7}));
  EXPECT_EQ(profile::fastest_rounds(rounds, {0, 1, 2}), (std::vector<double>{1, 2}));
  EXPECT_EQ(profile::fastest_rounds({{4, 7}, {3, 9}}, {2, 2}), (std::vector<double>{3, 7}));
  // All of one grade (every round contended, say): the fastest of all.
  EXPECT_EQ(profile::fastest_rounds(rounds, {0, 0, 0}), (std::vector<double>{1, 2}));
}

TEST_F(Peaks, PeaksForUsesTheCachedEntryOfThisDeviceAndBuild) {
  DevicePeaks p = fake(peaks_key(Device::cpu()));
  p.device = Device::cpu();
  p.fp32_flops = 123e9;  // no real CPU measures exactly this
  save_peaks(p, file_);
  DevicePeaks got = peaks_for(Device::cpu());
  EXPECT_TRUE(got.from_cache);
  EXPECT_DOUBLE_EQ(got.fp32_flops, 123e9);
  EXPECT_NE(peaks_key(Device::cpu()).find("cpu"), std::string::npos);
}

TEST_F(Peaks, CorruptCacheIsAnErrorNamingTheFile) {
  fs::create_directories(fs::path(file_).parent_path());
  std::ofstream(file_) << "{ not json";
  DevicePeaks r;
  try {
    load_peaks("x", file_, r);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(file_), std::string::npos) << e.what();
  }
}

// The efficiency of a class of a layer type falls back to the type's own where the cache was
// written before the class was measured ("Conv2d:3x3" came after "Conv2d"); a type never
// measured counts as 1.
TEST_F(Peaks, AClassNotMeasuredTakesItsTypesEfficiency) {
  DevicePeaks p = fake("k");
  p.efficiency = {{"Conv2d", 0.6}, {"Conv2d:narrow", 0.3}};
  EXPECT_DOUBLE_EQ(p.efficiency_for("Conv2d:narrow"), 0.3);
  EXPECT_DOUBLE_EQ(p.efficiency_for("Conv2d:3x3"), 0.6);
  EXPECT_DOUBLE_EQ(p.efficiency_for("Conv2d"), 0.6);
  EXPECT_DOUBLE_EQ(p.efficiency_for("LSTM"), 1.0);
  EXPECT_DOUBLE_EQ(p.efficiency_for("Linear:wide"), 1.0);
}

// Convolutions fall into the classes calibrate.cpp measures apart: 3x3 at stride 1 with 16 or
// more channels in and out over 2048 or more output pixels of the batch (what the CPU runs as a
// Winograd), narrow ones (a GEMM side of 16 or less), and the rest.
TEST_F(Peaks, ConvolutionsGetTheirKernelClass) {
  struct Case {
    nn::ModulePtr conv;
    Shape input;
    const char* kernel;
  };
  const Case cases[] = {
      {std::make_shared<nn::Conv2d>(16, 16, 3, 1, 1), {64, 16, 32, 32}, "Conv2d:3x3"},
      {std::make_shared<nn::Conv2d>(32, 64, 3, 1, 0), {8, 32, 26, 26}, "Conv2d:3x3"},
      {std::make_shared<nn::Conv2d>(16, 16, 3, 1, 1), {1, 16, 32, 32}, "Conv2d:narrow"},
      {std::make_shared<nn::Conv2d>(32, 32, 3, 1, 1), {1, 32, 16, 16}, "Conv2d"},
      {std::make_shared<nn::Conv2d>(16, 32, 3, 2, 1), {64, 16, 32, 32}, "Conv2d"},
      {std::make_shared<nn::Conv2d>(32, 32, 5, 1, 2), {64, 32, 16, 16}, "Conv2d"},
      {std::make_shared<nn::Conv2d>(3, 16, 3, 1, 1), {64, 3, 32, 32}, "Conv2d:narrow"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.conv->describe() + " on " + shape_str(c.input));
    EXPECT_EQ(layer_costs(*c.conv, c.input, true).front().kernel, c.kernel);
  }
}

TEST_F(Peaks, RooflineAndRidge) {
  DevicePeaks p = fake("k");
  EXPECT_DOUBLE_EQ(p.ridge(), 1.25e12 / 2e11);
  EXPECT_DOUBLE_EQ(p.roof(1.0), 2e11);       // memory-bound
  EXPECT_DOUBLE_EQ(p.roof(100.0), 1.25e12);  // compute-bound
  // A working set that fits the first level (cache) gets its bandwidth; a larger one memory's.
  EXPECT_DOUBLE_EQ(p.bandwidth_for(1e6), 1e12);
  EXPECT_DOUBLE_EQ(p.bandwidth_for(1e8), 2e11);
  EXPECT_DOUBLE_EQ(p.bandwidth_for(1e10), 2e11);
  EXPECT_DOUBLE_EQ(p.roof(1.0, 1e6), 1e12);
}

TEST_F(Peaks, MeasuringTheCpuGivesSaneFiguresAndCachesThem) {
  const ParallelThresholds saved = parallel_thresholds();
  DevicePeaks p = measure_peaks(Device::cpu());
  EXPECT_FALSE(p.from_cache);
  EXPECT_GT(p.fp32_flops, 1e9);  // any CPU of this century, even a loaded one
  EXPECT_LT(p.fp32_flops, 1e14);
  EXPECT_GT(p.mem_bandwidth, 1e8);
  EXPECT_GT(p.op_s, 0);
  EXPECT_LT(p.op_s, 1e-3);
  EXPECT_GT(p.train_op_s, 0);
  EXPECT_EQ(p.launch_s, p.op_s);
  EXPECT_EQ(p.h2d_pinned, 0);
  EXPECT_GE(p.gemm_overhead_s, 0);
  // The thread split: measured with several threads, and in force once measured, unless another
  // process held a core through the whole measurement.
  EXPECT_EQ(p.parallel_measured, p.threads >= 2);
  if (p.threads >= 2) {
    EXPECT_GT(p.parallel.conv_macs_per_thread, 0);
    EXPECT_LT(p.parallel.conv_macs_per_thread, 1e9);
    EXPECT_GE(p.parallel.gemm_macs_per_thread, 0);
    EXPECT_LT(p.parallel.gemm_macs_per_thread, 1e9);
    EXPECT_GE(p.parallel.elementwise_per_thread, 1);
    if (p.parallel_contended)
      EXPECT_EQ(parallel_thresholds(), saved);
    else
      EXPECT_EQ(parallel_thresholds(), p.parallel);
  }
  DevicePeaks cached;
  ASSERT_TRUE(load_peaks(peaks_key(Device::cpu()), file_, cached));
  EXPECT_DOUBLE_EQ(cached.fp32_flops, p.fp32_flops);
  EXPECT_EQ(cached.parallel, p.parallel);
  EXPECT_TRUE(peaks_for(Device::cpu()).from_cache);
  set_parallel_thresholds(saved);  // the other tests run with the defaults
}

// A measurement during which another process held a core throughout (the probe forced to say
// so) keeps the cached entry's clean thresholds; without one it records its own as contended and
// leaves those in force alone.
TEST_F(Peaks, AContendedMeasurementKeepsTheEarlierCleanSplitOrIsNotUsed) {
  if (num_threads() < 2) GTEST_SKIP() << "one thread: nothing to split";
  const ParallelThresholds saved = parallel_thresholds();
  struct Busy {
    Busy() {
      profile::set_core_wait_probe([](int) { return 2.0; });
    }
    ~Busy() { profile::set_core_wait_probe(nullptr); }
  } busy;
  DevicePeaks earlier = fake(peaks_key(Device::cpu()));
  earlier.device = Device::cpu();
  earlier.parallel = {123456, 4321, 777};
  earlier.parallel_measured = true;
  earlier.parallel_measured_at = "2001-02-03T04:05:06Z";
  save_peaks(earlier, file_);
  DevicePeaks p = measure_peaks(Device::cpu());
  EXPECT_FALSE(p.parallel_contended);
  EXPECT_EQ(p.parallel, earlier.parallel);
  EXPECT_EQ(p.parallel_measured_at, earlier.parallel_measured_at);
  EXPECT_NE(p.measured_at, earlier.measured_at);  // the rest is measured anew
  EXPECT_EQ(parallel_thresholds(), earlier.parallel);
  DevicePeaks cached;
  ASSERT_TRUE(load_peaks(p.key, file_, cached));
  EXPECT_EQ(cached.parallel_measured_at, earlier.parallel_measured_at);

  set_parallel_thresholds(saved);
  fs::remove(file_);  // nothing earlier to keep
  p = measure_peaks(Device::cpu());
  EXPECT_TRUE(p.parallel_contended);
  EXPECT_EQ(parallel_thresholds(), saved);
  EXPECT_FALSE(use_cached_parallel_thresholds());
  set_parallel_thresholds(saved);
}

TEST_F(Peaks, MeasuringOneThreadLeavesTheThreadSplitAlone) {
  const ParallelThresholds saved = parallel_thresholds();
  const int threads = num_threads();
  ParallelThresholds mine;
  mine.conv_macs_per_thread = 777;
  set_parallel_thresholds(mine);
  set_num_threads(1);
  DevicePeaks p = measure_peaks(Device::cpu());
  set_num_threads(threads);
  EXPECT_FALSE(p.parallel_measured);
  EXPECT_EQ(parallel_thresholds(), mine);  // a later 1-thread row must not undo the measured split
  set_parallel_thresholds(saved);
}

}  // namespace
}  // namespace freight
