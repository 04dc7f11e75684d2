// The host side of GPU training, checked on the CPU: the optimizer's learning rate and step counts
// live where the kernels run and are read and advanced by them (so a replayed kernel call is an
// update like any other), the metrics kernel agrees
// with the host's count, a device-resident dataset gathers exactly the Loader's batches, the
// out-of-memory advice, the precision setting, and the flags that need a GPU.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>

#include "common/test_util.h"
#include "data/device_data.h"
#include "freight/data/loader.h"
#include "freight/freight.h"
#include "freight/nn/layers.h"
#include "freight/optim/optim.h"
#include "freight/training.h"
#include "ops/kernels/metrics.h"
#include "ops/kernels/optim.h"

namespace freight {
namespace {

// ---------------------------------------------------------------- step counters
struct Twin {
  std::vector<Tensor> params;
  std::unique_ptr<optim::Optimizer> opt;
};

Twin make_twin(const std::string& name, DType dtype) {
  Twin t;
  Generator g(3);
  t.params = {Tensor::normal({5, 3}, 0, 1, dtype, Device::cpu(), &g).set_requires_grad(),
              Tensor::normal({3}, 0, 1, dtype, Device::cpu(), &g).set_requires_grad()};
  t.opt = make_optimizer(name, t.params, 0.05, 0.9, 0.01);
  return t;
}

void give_grads(Twin& t, int step) {
  Generator g(100 + uint64_t(step));
  for (const Tensor& p : t.params)
    p.set_grad(Tensor::normal(p.shape(), 0, 1, p.dtype(), Device::cpu(), &g));
}

TEST(StepCounters, TheKernelsAdvanceEachParametersCount) {
  Twin t = make_twin("adam", DType::F32);
  for (int step = 0; step < 3; ++step) {
    give_grads(t, step);
    t.opt->step();
  }
  EXPECT_EQ(t.opt->step_counts(), (std::vector<int64_t>{3, 3}));
  // A parameter without a gradient is skipped, and so is its count.
  t.params[1].set_grad(Tensor());
  t.opt->step();
  EXPECT_EQ(t.opt->step_counts(), (std::vector<int64_t>{4, 3}));
  for (const auto& [name, v] : t.opt->state()) {
    if (name.ends_with(".step")) {
      EXPECT_EQ(v.item(), name == "state.0.step" ? 4.0 : 3.0) << name;
    }
  }
}

// What a CUDA graph does to an optimizer step: it launches the captured kernel call again with
// the same arguments. Those arguments are the counters' addresses, so a repeated call must be
// the next update, with the learning rate set since and the next bias corrections: bit for bit
// what step() gives.
TEST(StepCounters, RepeatingTheKernelCallIsTheNextUpdate) {
  for (std::string name : {"sgd", "nesterov", "adam", "adamw"}) {
    for (DType dtype : {DType::F32, DType::F64}) {
      SCOPED_TRACE(name + " " + dtype_name(dtype));
      Twin stepped = make_twin(name, dtype), repeated = make_twin(name, dtype);
      give_grads(stepped, 0);
      give_grads(repeated, 0);
      stepped.opt->step();
      repeated.opt->step();  // creates the buffers, as the warm-up before a capture does
      // The call step() makes, repeated by hand ("replays"): every later update reuses the
      // first replay's gradients, so give `stepped` the same ones.
      std::vector<Tensor> grads;
      for (const Tensor& p : repeated.params) grads.push_back(p.grad());
      optim::NamedTensors state = repeated.opt->state();
      auto buffer = [&](size_t i, const char* field) {
        for (const auto& [key, v] : state)
          if (key == fmt::format("state.{}.{}", i, field)) return v;
        return Tensor();
      };
      // The counters as the optimizer's after its first update: lr, counts {1, 1}.
      StepCounters counters{Tensor::zeros({1}, DType::F64),
                            Tensor::from_vector(std::vector<int64_t>{1, 1}, {2}),
                            {0, 1}};
      for (int step = 1; step < 6; ++step) {
        double lr = 0.05 / (1 + step);  // a schedule: the repeated call must follow it
        stepped.opt->set_lr(lr);
        repeated.opt->set_lr(lr);
        stepped.opt->step();
        counters.lr.fill_(lr);
        if (name == "adam" || name == "adamw") {
          AdamConfig cfg;  // make_optimizer's: betas (0.9, 0.999), eps 1e-8, weight decay 0.01
          cfg.weight_decay = 0.01;
          cfg.decoupled = name == "adamw";
          std::vector<Tensor> m{buffer(0, "exp_avg"), buffer(1, "exp_avg")};
          std::vector<Tensor> v{buffer(0, "exp_avg_sq"), buffer(1, "exp_avg_sq")};
          kernels::adam_step(DeviceType::CPU, repeated.params, grads, m, v, counters, cfg);
        } else {
          SgdConfig cfg;
          cfg.momentum = 0.9;
          cfg.weight_decay = 0.01;
          cfg.nesterov = name == "nesterov";
          std::vector<Tensor> momentum{buffer(0, "momentum_buffer"), buffer(1, "momentum_buffer")};
          std::vector<uint8_t> fresh{0, 0};
          kernels::sgd_step(DeviceType::CPU, repeated.params, grads, momentum, fresh, counters,
                            cfg);
        }
      }
      for (size_t i = 0; i < stepped.params.size(); ++i)
        EXPECT_EQ(stepped.params[i].to_double_vector(), repeated.params[i].to_double_vector())
            << "parameter " << i;
      EXPECT_EQ(counters.step_counts.to_int_vector(), stepped.opt->step_counts());
    }
  }
}

// ---------------------------------------------------------------- metrics
TEST(Metrics, AccumulateMatchesTheHostCount) {
  Generator g(8);
  Tensor out = Tensor::normal({37, 10}, 0, 1, DType::F32, Device::cpu(), &g);
  Tensor labels = Tensor::randint({37}, 0, 10, Device::cpu(), &g);
  // A tie: the first maximum wins, as argmax.
  out.data<float>()[3 * 10 + 2] = 9;
  out.data<float>()[3 * 10 + 7] = 9;
  Tensor loss = Tensor::scalar(0.75, DType::F32);
  Tensor sums = Tensor::zeros({2}, DType::F64);
  kernels::accumulate_metrics(DeviceType::CPU, out, labels, loss, 37.0, sums);
  kernels::accumulate_metrics(DeviceType::CPU, out, labels, loss, 37.0, sums);
  std::vector<double> s = sums.to_double_vector();
  EXPECT_EQ(s[0], 2 * 0.75 * 37);
  EXPECT_EQ(s[1], 2.0 * double(count_correct(out, labels)));
}

// ---------------------------------------------------------------- data on the device
data::Dataset pixels(int64_t n) {
  Generator g(4);
  data::Dataset d;
  d.name = "pixels";
  d.num_classes = 10;
  d.inputs = Tensor::randint({n, 1, 5, 3}, 0, 256, Device::cpu(), &g).to(DType::U8);
  d.labels = Tensor::randint({n}, 0, 10, Device::cpu(), &g);
  return d;
}

TEST(DeviceData, GathersExactlyTheLoadersBatches) {
  data::Dataset d = pixels(53);
  for (bool shuffle : {true, false}) {
    data::LoaderOptions o;
    o.batch_size = 8;
    o.seed = 11;
    o.shuffle = shuffle;
    o.mean = 0.2860;
    o.std = 0.3530;
    data::Loader loader(d, o);
    data::DeviceData dd(d, o);  // on the CPU: the same kernel slot as on a GPU
    ASSERT_EQ(dd.num_batches(), loader.num_batches());
    for (int64_t epoch : {0, 3}) {
      loader.start_epoch(epoch);
      dd.start_epoch(epoch);
      data::Batch a;
      for (int64_t b = 0; loader.next(a); ++b) {
        data::Batch g = dd.batch(b);
        ASSERT_EQ(g.inputs.shape(), a.inputs.shape());
        EXPECT_EQ(g.inputs.to_float_vector(), a.inputs.to_float_vector())
            << "epoch " << epoch << " batch " << b << " (bit-identical normalisation)";
        EXPECT_EQ(g.labels.to_int_vector(), a.labels.to_int_vector());
      }
    }
  }
}

// Each rank's DeviceData gathers its shard of every global batch, exactly the sharded Loader's.
TEST(DeviceData, ShardsMatchTheShardedLoader) {
  data::Dataset d = pixels(53);  // batches of 16: 16, 16, 16, 5
  for (int shards : {2, 3}) {
    for (int r = 0; r < shards; ++r) {
      data::LoaderOptions o;
      o.batch_size = 16;
      o.seed = 3;
      o.shard = r;
      o.shards = shards;
      data::Loader loader(d, o);
      data::DeviceData dd(d, o);
      loader.start_epoch(2);
      dd.start_epoch(2);
      data::Batch a;
      for (int64_t b = 0; loader.next(a); ++b) {
        ASSERT_EQ(dd.batch_rows(b), a.inputs.size(0));
        data::Batch g = dd.batch(b);
        EXPECT_EQ(g.inputs.to_float_vector(), a.inputs.to_float_vector())
            << "rank " << r << " of " << shards << ", batch " << b;
        EXPECT_EQ(g.labels.to_int_vector(), a.labels.to_int_vector());
      }
    }
  }
}

TEST(DeviceData, EpochOrderIsAPermutationAndAPureFunction) {
  std::vector<int64_t> a = data::epoch_order(1000, 5, 2), b = data::epoch_order(1000, 5, 2);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, data::epoch_order(1000, 5, 3));
  std::vector<int64_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(sorted[i], i);
  std::vector<int64_t> id = data::epoch_order(4, 5, 2, /*shuffle=*/false);
  EXPECT_EQ(id, (std::vector<int64_t>{0, 1, 2, 3}));
}

TEST(DeviceData, StaticBuffersOfTheWrongShapeAreRefused) {
  data::Dataset d = pixels(20);
  data::LoaderOptions o;
  o.batch_size = 8;
  data::DeviceData dd(d, o);
  dd.start_epoch(0);
  Tensor x = Tensor::empty({8, 1, 5, 3}), y = Tensor::empty({8}, DType::I64);
  EXPECT_NO_THROW(dd.gather(0, x, y));
  EXPECT_THROW(dd.gather(2, x, y), Error) << "batch 2 has 4 rows";
}

// ---------------------------------------------------------------- out of memory
TEST(OutOfMemoryAdvice, NamesABatchSizeThatFits) {
  const size_t MiB = size_t(1) << 20;
  // Batch 512 took 6 GiB, then asked for 2 GiB with 1 GiB free: >= 16 MiB per sample, and the
  // step could have had 7 GiB: 0.9 · 7168 / 16 = 403 → 400.
  std::string m = out_of_memory_advice(2048 * MiB, 1024 * MiB, 6144 * MiB, 500 * MiB, 512);
  EXPECT_NE(m.find("--batch-size 400 or smaller"), std::string::npos) << m;
  EXPECT_NE(m.find("16.0 MiB per sample"), std::string::npos) << m;
  EXPECT_NE(m.find("--batch-size 512"), std::string::npos) << m;
  // An estimate at or above the batch that failed halves it instead.
  m = out_of_memory_advice(1 * MiB, 1000 * MiB, 100 * MiB, 0, 64);
  EXPECT_NE(m.find("--batch-size 32 or smaller"), std::string::npos) << m;
  // Nothing fits.
  m = out_of_memory_advice(1000 * MiB, 0, 0, 70000 * MiB, 1);
  EXPECT_NE(m.find("not even one sample"), std::string::npos) << m;
}

// ---------------------------------------------------------------- settings and flags
TEST(Precision, NamesRoundTripAndBadOnesAreErrors) {
  for (Precision p : {Precision::FP32, Precision::TF32, Precision::BF16})
    EXPECT_EQ(parse_precision(precision_name(p)), p);
  try {
    parse_precision("fp16");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("fp32, tf32, bf16"), std::string::npos) << e.what();
  }
  Precision before = precision();
  set_precision(Precision::TF32);
  EXPECT_EQ(precision(), Precision::TF32);
  set_precision(before);
}

TEST(GpuFlags, OnTheCpuTheyAreErrorsNotFallbacks) {
  TrainOptions o;
  o.model = "mlp";
  o.data = "synthetic";
  o.device = "cpu";
  o.epochs = 1;
  o.precision = "tf32";
  try {
    train(o);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--precision tf32 needs a CUDA device"), std::string::npos)
        << e.what();
  }
  o.precision = "fp32";
  o.data_on_device = true;
  try {
    train(o);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--data-on-device"), std::string::npos) << e.what();
  }
}

TEST(BatchNormCounter, TrainingForwardsCountOnTheTensorItself) {
  nn::BatchNorm1d bn(3);
  bn.train();
  bn(Tensor::ones({4, 3}));
  bn(Tensor::ones({4, 3}));
  EXPECT_EQ(bn.num_batches_tracked().item(), 2.0);
  // A loaded count goes on from the loaded value (the counter is the buffer, nothing beside it).
  bn.load_state_dict({{"weight", bn.weight().clone()},
                      {"bias", bn.bias().clone()},
                      {"running_mean", bn.running_mean().clone()},
                      {"running_var", bn.running_var().clone()},
                      {"num_batches_tracked", Tensor::from_vector(std::vector<int64_t>{40}, {})}});
  bn(Tensor::ones({4, 3}));
  EXPECT_EQ(bn.num_batches_tracked().item(), 41.0);
  bn.eval();
  bn(Tensor::ones({4, 3}));
  EXPECT_EQ(bn.num_batches_tracked().item(), 41.0);
}

TEST(PinnedMemory, WithoutAGpuItIsAnError) {
  if (cuda_available()) GTEST_SKIP() << "a GPU is present (tests/cuda covers pinned memory)";
  EXPECT_THROW(empty_pinned({4}, DType::F32, Device::cuda(0)), Error);
}

}  // namespace
}  // namespace freight
