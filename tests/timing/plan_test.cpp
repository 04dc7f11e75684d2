// freight plan against reality: the predicted CPU epoch of zoo models lies within 1.5x of a
// measured epoch (LeNet-5: 2x, see below), at the first or a second attempt. The peaks are measured
// in this process, just before, and both sides are timed the same way (the training thread's CPU
// clock, as measure_peaks does), so a busy machine slows neither the prediction's inputs nor the
// measurement out of step with the other.
#include <gtest/gtest.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <vector>

#include "bench/timing.h"
#include "common/test_util.h"
#include "freight/nn/model_file.h"
#include "freight/peaks.h"
#include "freight/plan.h"
#include "freight/runtime.h"
#include "freight/training.h"

namespace freight {
namespace {

namespace fs = std::filesystem;

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// Points FREIGHT_PEAKS_FILE at a fresh file for the suite (and puts the old value back).
class PlanVsMeasured : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    peaks_file_ = new test::ScopedPeaksFile("plan_test");
    // One thread for the peaks, the plan and the training alike: a lone thread's CPU clock counts
    // its own work only, while with two, a thread spinning at OpenBLAS's inner barriers for a
    // preempted peer burns CPU time on a busy machine (ctest -j, other jobs).
    set_num_threads(1);
    // Measured here, now: plan() then reads these peaks from the cache file.
    peaks_ = new DevicePeaks(measure_peaks(Device::cpu()));
  }
  static void TearDownTestSuite() {
    delete peaks_file_;
    delete peaks_;
  }
  static test::ScopedPeaksFile* peaks_file_;
  static DevicePeaks* peaks_;
};
test::ScopedPeaksFile* PlanVsMeasured::peaks_file_ = nullptr;
DevicePeaks* PlanVsMeasured::peaks_ = nullptr;

struct Measured {
  double cpu_epoch_s = 0;   // the epoch's training loop on this thread's CPU clock
  double wall_epoch_s = 0;  // the same on the wall clock
  int64_t batches = 0;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// One epoch of `model` on `samples` synthetic samples on the CPU, timed batch by batch: the
// epoch is the median batch times the batches, the statistic measure_peaks uses for its own
// figures (on a busy machine a preempted peer thread makes OpenBLAS's spinning threads burn CPU
// time in some batches). The first batch (fresh allocations, cold caches) is left out.
Measured measure_epoch(const std::string& model, int64_t samples) {
  TrainOptions o;
  o.model = model;
  o.data = "synthetic";
  o.device = "cpu";
  o.threads = 1;
  o.epochs = 1;
  o.limit_train = samples;
  o.limit_test = 16;
  o.schedule = "none";
  double cpu0 = 0, wall0 = 0;
  std::vector<double> cpu, wall;
  int64_t batches = 0;
  auto now = [] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  };
  TrainCallbacks cb;
  cb.on_batch = [&](const BatchProgress& p) {
    double c = thread_cpu_seconds(), w = now();
    if (p.batch > 1) {
      cpu.push_back(c - cpu0);
      wall.push_back(w - wall0);
    }
    cpu0 = c;
    wall0 = w;
    batches = p.batches;
  };
  train(o, cb);
  Measured m;
  m.batches = batches;
  m.cpu_epoch_s = median(cpu) * double(batches);
  m.wall_epoch_s = median(wall) * double(batches);
  return m;
}

TEST_F(PlanVsMeasured, CpuEpochWithinOneAndAHalfTimes) {
  ASSERT_GT(peaks_->fp32_flops, 0);
  // Sample counts are whole batches of each model's default size, small enough that the test
  // stays within seconds on two busy cores.
  // LeNet-5 is held to 2x: its convolutions have 1 and 6 input channels, where im2col and the
  // tiny GEMMs cost well beyond the narrow-convolution reference, and the plan under-predicts it
  // (about 0.55-0.7x on the development machine); the others to 1.5x.
  struct Case {
    const char* model;
    int64_t samples;
    double tolerance;
  };
  for (const Case& c :
       {Case{"mlp", 64 * 48, 1.5}, Case{"lenet5", 64 * 24, 2.0}, Case{"lstm-rows", 64 * 12, 1.5},
        Case{"mnist-cnn", 64 * 6, 1.5}, Case{"fcn5", 64 * 5, 1.5}}) {
    SCOPED_TRACE(c.model);
    // A shared virtual machine runs faster and slower phases (other tenants, frequency), and
    // the peaks were measured in one of them: a model outside the tolerance is measured again,
    // with the peaks measured afresh just before, and fails only when it misses twice (a real
    // error of the plan's model misses every time).
    double ratio = 0;
    for (int attempt = 1; attempt <= 2; ++attempt) {
      if (attempt == 2) *peaks_ = measure_peaks(Device::cpu());
      PlanOptions po;
      po.model = c.model;
      po.samples = c.samples;
      po.epochs = 1;
      po.reference_gpu = false;
      PlanResult r = plan(po);
      ASSERT_FALSE(r.devices.empty());
      const DevicePlan& cpu = r.devices.front();
      ASSERT_TRUE(cpu.peaks.device.is_cpu());
      EXPECT_EQ(cpu.peaks.measured_at, peaks_->measured_at) << "plan() must use the suite's peaks";
      ASSERT_GT(cpu.epoch_s, 0);
      EXPECT_EQ(r.recommendation, "cpu") << "no GPU here: " << r.reason;

      Measured m = measure_epoch(c.model, c.samples);
      ASSERT_EQ(m.batches, r.steps_per_epoch);
      ratio = cpu.epoch_s / m.cpu_epoch_s;
      std::printf(
          "  %-10s predicted %8.1f ms, measured %8.1f ms CPU clock (%8.1f ms wall): %.2fx%s\n",
          c.model, 1e3 * cpu.epoch_s, 1e3 * m.cpu_epoch_s, 1e3 * m.wall_epoch_s, ratio,
          attempt == 2 ? " (second attempt, peaks measured again)" : "");
      if (ratio > 1 / c.tolerance && ratio < c.tolerance) break;
    }
    EXPECT_GT(ratio, 1 / c.tolerance) << "predicted/measured, twice out of tolerance";
    EXPECT_LT(ratio, c.tolerance) << "predicted/measured, twice out of tolerance";
  }

  // The rest of a plan (one test, so ctest's one process per test measures the peaks once).
  PlanOptions po;
  po.model = "mlp";
  po.samples = 1000;
  po.epochs = 3;
  PlanResult r = plan(po);
  EXPECT_EQ(r.steps_per_epoch, 16);  // 1000 / 64, rounded up
  ASSERT_GE(r.devices.size(), 2u);   // the CPU and the datasheet GPU for comparison
  const DevicePlan& cpu = r.devices.front();
  EXPECT_NEAR(cpu.params_bytes, 4.0 * double(r.params), 1);
  EXPECT_GT(cpu.activation_bytes, 0);
  EXPECT_TRUE(cpu.fits);
  EXPECT_NEAR(cpu.total_s, 3 * cpu.epoch_s, 1e-9);
  EXPECT_FALSE(r.devices.back().measured);
  EXPECT_FALSE(r.reason.empty());

  // Memory: the plan's total for a training step against the allocator's measured peak over
  // steps of the same model, batch and optimizer (bench's measurement: SGD with momentum). The
  // plan counts what each op keeps for the backward (plan.cpp: activation_bytes).
  struct MemoryCase {
    const char* model;
    int64_t batch;
  };
  for (const MemoryCase& c : {MemoryCase{"mlp", 256}, MemoryCase{"lenet5", 64},
                              MemoryCase{"mnist-cnn", 64}, MemoryCase{"fashion-cnn", 32}}) {
    SCOPED_TRACE(c.model);
    PlanOptions mo;
    mo.model = c.model;
    mo.batch_size = c.batch;
    mo.optimizer = "sgd";
    mo.reference_gpu = false;
    const double predicted = plan(mo).devices.front().total_bytes;
    bench::TimingOptions quick;
    quick.seconds = 0.05;
    quick.min_rounds = 1;
    quick.warmup_seconds = 0;
    const double measured = double(bench::measure_freight(nn::load_model_spec(c.model), c.batch,
                                                          Device::cpu(), 0, quick, false)
                                       .peak_memory);
    const double ratio = predicted / measured;
    std::printf("  %-11s batch %3lld: memory predicted %6.1f MiB, measured %6.1f MiB: %.2fx\n",
                c.model, (long long)c.batch, predicted / (1 << 20), measured / (1 << 20), ratio);
    EXPECT_GT(ratio, 0.75);
    EXPECT_LT(ratio, 1.5);
  }
}

// freight plan --nodes: the ring all-reduce on NVLink within a node, InfiniBand between nodes.
TEST_F(PlanVsMeasured, DataParallelScalingAcrossNodes) {
  PlanOptions o;
  o.model = "resnet56-cifar";
  o.batch_size = 256;
  o.nodes = 4;
  o.gpus_per_node = 8;
  PlanResult r = plan(o);
  ASSERT_EQ(r.scaling.size(), 6u);  // 1 2 4 8 16 32
  EXPECT_EQ(r.scaling.front().gpus, 1);
  EXPECT_EQ(r.scaling.back().gpus, 32);
  EXPECT_EQ(r.scaling.back().nodes, 4);
  EXPECT_EQ(r.scaling[3].nodes, 1);  // 8 GPUs: one node, NVLink
  const double grad = 4.0 * double(r.params);
  EXPECT_DOUBLE_EQ(r.scaling[3].comm_s, nvlink_h100().all_reduce_seconds(grad, 8));
  EXPECT_DOUBLE_EQ(r.scaling[4].comm_s, infiniband_ndr().all_reduce_seconds(grad, 16));
  for (const ScalePoint& s : r.scaling) {
    EXPECT_LE(s.exposed_comm_s, s.comm_s);
    EXPECT_DOUBLE_EQ(s.step_s, s.compute_s + s.exposed_comm_s);
  }
  // A small model at a small global batch: the sums soon outlast the compute.
  o.model = "mlp";
  o.batch_size = 64;
  PlanResult small = plan(o);
  EXPECT_GT(small.comm_dominates_from, 1);
}

}  // namespace
}  // namespace freight
