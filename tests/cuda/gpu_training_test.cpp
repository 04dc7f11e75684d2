// GPU training machinery: device description, pinned memory and copy-stream uploads, the loader
// and --data-on-device against the CPU loader (bit-identical batches), the metrics kernel, CUDA
// graphs (replays equal eager steps, the capture's memory stays private, a host sync inside a
// capture is a clear error), whole training runs with graphs equal to eager ones, and the
// precision modes. Every test skips without a GPU; the CPU emulation (emulation/README.md)
// runs them. Tests that need a kernel slot check that it has a CUDA kernel (a build without one
// skips them).
#include <gtest/gtest.h>

#include <unistd.h>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "common/test_util.h"
#include "core/backend.h"
#include "data/device_data.h"
#include "freight/data/loader.h"
#include "freight/freight.h"
#include "freight/io/safetensors.h"
#include "freight/nn/container.h"
#include "freight/nn/layers.h"
#include "freight/optim/optim.h"
#include "freight/training.h"
#include "ops/kernels/conv.h"
#include "ops/kernels/counters.h"
#include "ops/kernels/metrics.h"
#include "ops/kernels/norm.h"
#include "ops/kernels/optim.h"
#include "ops/kernels/pool.h"

namespace freight::test {
namespace {

const Device kGpu = Device::cuda(0);

#define SKIP_WITHOUT_CUDA_KERNEL(slot)                              \
  do {                                                              \
    if (!::freight::kernels::slot.has(::freight::DeviceType::CUDA)) \
      GTEST_SKIP() << "this build has no CUDA kernel for " #slot;   \
  } while (0)

bool emulated() {
#ifdef FREIGHT_CUDA_EMULATION
  return true;
#else
  return false;
#endif
}

// ---------------------------------------------------------------- devices
TEST(CudaDevices, InfoDescribesEveryVisibleGpu) {
  FREIGHT_SKIP_WITHOUT_CUDA();
  std::vector<DeviceInfo> all = list_devices();
  ASSERT_EQ(int(all.size()), 1 + cuda_device_count());
  for (const DeviceInfo& d : all) {
    if (d.device.is_cpu()) continue;
    EXPECT_FALSE(d.name.empty());
    EXPECT_GT(d.memory_total, 0u);
    EXPECT_GT(d.memory_free, 0u);
    EXPECT_LE(d.memory_free, d.memory_total);
    EXPECT_GT(d.compute_units, 0);
    EXPECT_NE(d.compute_capability.find('.'), std::string::npos) << d.compute_capability;
    EXPECT_FALSE(d.driver_version.empty());
    EXPECT_FALSE(d.runtime_version.empty());
    EXPECT_NE(d.details.find("MHz"), std::string::npos) << d.details;
  }
  // A device index past the visible ones is a clear error (CUDA_VISIBLE_DEVICES applies).
  int n = cuda_device_count();
  try {
    resolve_device("cuda:" + std::to_string(n));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("CUDA_VISIBLE_DEVICES"), std::string::npos) << e.what();
  }
}

// ---------------------------------------------------------------- pinned memory, uploads
TEST(CudaPinned, BlocksAreCachedAndUploadsArrive) {
  FREIGHT_SKIP_WITHOUT_CUDA();
  Tensor h = empty_pinned({1000}, DType::F32, kGpu);
  EXPECT_TRUE(is_pinned(h));
  EXPECT_EQ(h.device(), Device::cpu());
  for (int i = 0; i < 1000; ++i) h.data<float>()[i] = float(i) * 0.5f;
  Tensor d = Tensor::empty({1000}, DType::F32, kGpu);
  DeviceBackend& be = backend_for(DeviceType::CUDA);
  std::unique_ptr<PendingUpload> up = be.upload(d.data_ptr(), h.data_ptr(), h.nbytes(), 0);
  up->wait();
  void* block = h.data_ptr();
  h = Tensor();  // freed while the copy may still be queued: reserved until it ran
  EXPECT_EQ(d.to_float_vector()[999], 999 * 0.5f);
  // The copy has run (to_float_vector waited for the compute stream, which waited for it), so
  // the block is served again for the same size.
  Tensor again = empty_pinned({1000}, DType::F32, kGpu);
  EXPECT_EQ(again.data_ptr(), block);
  // Pageable sources work too.
  std::vector<float> v(1000, 3.0f);
  Tensor d2 = Tensor::empty({1000}, DType::F32, kGpu);
  be.upload(d2.data_ptr(), v.data(), v.size() * sizeof(float), 0);  // destroyed: still ordered
  EXPECT_EQ(d2.to_float_vector(), v);
}

data::Dataset pixels(int64_t n, uint64_t seed = 4) {
  Generator g(seed);
  data::Dataset d;
  d.name = "pixels";
  d.num_classes = 10;
  d.inputs = Tensor::randint({n, 1, 9, 7}, 0, 256, Device::cpu(), &g).to(DType::U8);
  d.labels = Tensor::randint({n}, 0, 10, Device::cpu(), &g);
  return d;
}

TEST(CudaLoader, GpuBatchesAreBitIdenticalToTheCpuLoaders) {
  FREIGHT_SKIP_WITHOUT_CUDA();
  data::Dataset d = pixels(77);
  data::LoaderOptions o;
  o.batch_size = 16;
  o.seed = 3;
  o.mean = 0.1307;
  o.std = 0.3081;
  for (int variant = 0; variant < 3; ++variant) {
    data::LoaderOptions g = o;
    g.device = kGpu;
    if (variant == 1) g.host_alloc = pinned_host_allocator(kGpu);
    if (variant == 2) g.prefetch = 0;  // synchronous
    data::Loader cpu(d, o), gpu(d, g);
    for (int64_t epoch : {0, 1}) {
      cpu.start_epoch(epoch);
      gpu.start_epoch(epoch);
      data::Batch a, b;
      int64_t n = 0;
      while (cpu.next(a)) {
        ASSERT_TRUE(gpu.next(b));
        ASSERT_EQ(b.inputs.device(), kGpu);
        EXPECT_EQ(b.inputs.to_float_vector(), a.inputs.to_float_vector()) << variant;
        EXPECT_EQ(b.labels.to_int_vector(), a.labels.to_int_vector()) << variant;
        ++n;
      }
      EXPECT_FALSE(gpu.next(b));
      EXPECT_EQ(n, 5);
    }
  }
}

TEST(CudaDeviceData, GatheredBatchesAreBitIdenticalToTheCpuLoaders) {
  FREIGHT_SKIP_WITHOUT_CUDA();
  data::Dataset d = pixels(77);
  data::LoaderOptions o;
  o.batch_size = 16;
  o.seed = 3;
  o.mean = 0.2860;
  o.std = 0.3530;
  data::Loader cpu(d, o);
  data::LoaderOptions g = o;
  g.device = kGpu;
  data::DeviceData dd(d, g);
  EXPECT_GE(dd.bytes(), size_t(77 * 63));
  for (int64_t epoch : {0, 2}) {
    cpu.start_epoch(epoch);
    dd.start_epoch(epoch);
    data::Batch a;
    for (int64_t b = 0; cpu.next(a); ++b) {
      data::Batch x = dd.batch(b);
      EXPECT_EQ(x.inputs.to_float_vector(), a.inputs.to_float_vector()) << "batch " << b;
      EXPECT_EQ(x.labels.to_int_vector(), a.labels.to_int_vector()) << "batch " << b;
    }
  }
}

// ---------------------------------------------------------------- metrics
TEST(CudaMetrics, MatchTheCpuKernel) {
  FREIGHT_SKIP_WITHOUT_CUDA();
  Generator g(8);
  for (int64_t rows : {1, 37, 1000}) {
    for (int64_t classes : {1, 10, 300}) {
      Tensor out = Tensor::normal({rows, classes}, 0, 1, DType::F32, Device::cpu(), &g);
      Tensor labels = Tensor::randint({rows}, 0, classes, Device::cpu(), &g);
      Tensor loss = Tensor::scalar(1.25, DType::F32);
      Tensor c = Tensor::zeros({2}, DType::F64), d = Tensor::zeros({2}, DType::F64, kGpu);
      kernels::accumulate_metrics(DeviceType::CPU, out, labels, loss, double(rows), c);
      kernels::accumulate_metrics(DeviceType::CUDA, out.to(kGpu), labels.to(kGpu), loss.to(kGpu),
                                  double(rows), d);
      EXPECT_EQ(d.to_double_vector(), c.to_double_vector()) << rows << " x " << classes;
    }
  }
}

// BatchNorm's num_batches_tracked is advanced by this kernel, every element of the counter, from
// random starting values (a kernel that wrote only element 0, or set instead of adding, fails).
TEST(CudaCounters, CountUpMatchesTheCpuKernel) {
  FREIGHT_SKIP_WITHOUT_CUDA();
  Generator g(9);
  for (int64_t n : {1, 5, 1000}) {
    Tensor c = Tensor::randint({n}, -1000000, 1000000, Device::cpu(), &g);
    Tensor d = c.to(kGpu);
    for (int64_t amount : {1, 7}) {
      kernels::count_up(DeviceType::CPU, c, amount);
      kernels::count_up(DeviceType::CUDA, d, amount);
    }
    EXPECT_EQ(d.to_int_vector(), c.to_int_vector()) << n << " counters";
  }
}

// ---------------------------------------------------------------- CUDA graphs
struct Net {
  nn::ModulePtr model;
  std::unique_ptr<optim::Optimizer> opt;
};

Net small_net(const std::string& optimizer) {
  manual_seed(5);
  Net n;
  n.model = std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::Linear>(20, 32), std::make_shared<nn::BatchNorm1d>(32),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::Dropout>(0.3),
      std::make_shared<nn::Linear>(32, 4)});
  n.model->to(kGpu);
  n.opt = make_optimizer(optimizer, n.model->parameters(), 0.05, 0.9, 1e-3);
  return n;
}

std::vector<std::pair<Tensor, Tensor>> batches(int count) {
  Generator g(77);
  std::vector<std::pair<Tensor, Tensor>> out;
  for (int i = 0; i < count; ++i)
    out.emplace_back(Tensor::normal({16, 20}, 0, 1, DType::F32, kGpu, &g),
                     Tensor::randint({16}, 0, 4, kGpu, &g));
  return out;
}

void step_body(Net& n, const Tensor& x, const Tensor& y) {
  n.opt->zero_grad();
  Tensor loss = cross_entropy((*n.model)(x), y);
  loss.backward();
  n.opt->step();
}

TEST(CudaGraph, ReplayedStepsEqualEagerSteps) {
  FREIGHT_SKIP_WITHOUT_CUDA();
  SKIP_WITHOUT_CUDA_KERNEL(sgd_step);
  SKIP_WITHOUT_CUDA_KERNEL(adam_step);
  const int kSteps = 6;
  auto data = batches(kSteps);
  for (std::string name : {"sgd", "adamw"}) {
    SCOPED_TRACE(name);
    // Eager, plain optimizer, a learning rate that changes every step.
    Net eager = small_net(name);
    for (int k = 0; k < kSteps; ++k) {
      eager.opt->set_lr(0.05 / (1 + k));
      step_body(eager, data[k].first, data[k].second);
    }
    uint64_t eager_offset = default_generator().offset();
    // Graph: one eager step (creates the optimizer's buffers), the capture of step 2 and its
    // first replay, then replays; inputs copied into static tensors. Nothing is done on the
    // host around a replay but the schedule's set_lr: the step counts, BatchNorm's
    // num_batches_tracked and the learning rate are read and advanced on the device.
    Net graph = small_net(name);
    Tensor sx = Tensor::empty({16, 20}, DType::F32, kGpu);
    Tensor sy = Tensor::empty({16}, DType::I64, kGpu);
    std::unique_ptr<DeviceGraph> g;
    for (int k = 0; k < kSteps; ++k) {
      graph.opt->set_lr(0.05 / (1 + k));
      if (k == 0) {
        step_body(graph, data[k].first, data[k].second);
        continue;
      }
      sx.copy_(data[k].first);
      sy.copy_(data[k].second);
      if (k == 1) {
        g = backend_for(DeviceType::CUDA).capture(0, [&] { step_body(graph, sx, sy); });
        g->replay();
      } else {
        g->replay();
      }
    }
    EXPECT_EQ(default_generator().offset(), eager_offset)
        << "replays advance the generator as eager steps do";
    nn::NamedTensors pe = eager.model->state_dict(), pg = graph.model->state_dict();
    ASSERT_EQ(pe.size(), pg.size());
    for (size_t i = 0; i < pe.size(); ++i)
      EXPECT_EQ(pg[i].second.to_double_vector(), pe[i].second.to_double_vector()) << pe[i].first;
    optim::NamedTensors se = eager.opt->state(), sg = graph.opt->state();
    ASSERT_EQ(se.size(), sg.size());
    for (size_t i = 0; i < se.size(); ++i)
      EXPECT_EQ(sg[i].second.to_double_vector(), se[i].second.to_double_vector()) << se[i].first;
  }
}

// The optimizer's table of a captured step is a constant of its graph: a re-capture (as after
// a change of batch shape) must not leave the old graph's table behind.
TEST(CudaGraph, RecapturingFreesTheOldGraphsOptimizerTables) {
  FREIGHT_SKIP_WITHOUT_CUDA();
  SKIP_WITHOUT_CUDA_KERNEL(adam_step);
  auto data = batches(1);
  Net n = small_net("adamw");
  step_body(n, data[0].first, data[0].second);  // the optimizer's buffers exist now
  Tensor sx = data[0].first.clone(), sy = data[0].second.clone();
  size_t after_first = 0;
  for (int round = 0; round < 4; ++round) {
    std::unique_ptr<DeviceGraph> g =
        backend_for(DeviceType::CUDA).capture(0, [&] { step_body(n, sx, sy); });
    g->replay();
    g.reset();
    synchronize(kGpu);
    size_t in_use = memory_stats(kGpu).in_use;
    if (round == 0) after_first = in_use;
    EXPECT_EQ(in_use, after_first) << "re-capture " << round << " kept memory of an old graph";
  }
}

TEST(CudaGraph, CaptureAllocationsStayPrivateUntilTheGraphIsGone) {
  FREIGHT_SKIP_WITHOUT_CUDA();
  const Shape shape{1000, 37};
  synchronize(kGpu);
  size_t base = memory_stats(kGpu).in_use;
  void* inside = nullptr;
  Tensor a = Tensor::ones(shape, DType::F32, kGpu);
  Tensor out;
  std::unique_ptr<DeviceGraph> g = backend_for(DeviceType::CUDA).capture(0, [&] {
    Tensor tmp = mul(a, a);  // freed before the capture ends
    inside = tmp.data_ptr();
    out = add(tmp, a);
  });
  EXPECT_GE(memory_stats(kGpu).in_use, base + 3 * a.nbytes()) << "a, out and the freed temporary";
  // Nothing ran yet; shared allocations of the same size never get the graph's blocks.
  Tensor other = Tensor::full(shape, 7.0, DType::F32, kGpu);
  EXPECT_NE(other.data_ptr(), inside);
  g->replay();
  EXPECT_EQ(out.to_float_vector()[0], 2.0f);
  a.fill_(3.0);
  g->replay();
  EXPECT_EQ(out.to_float_vector()[0], 12.0f) << "a replay reads the inputs' current values";
  EXPECT_EQ(other.to_float_vector()[0], 7.0f) << "the graph never wrote a shared block";
  out = Tensor();
  g.reset();  // its pool joins the shared cache
  other = Tensor();
  a = Tensor();
  EXPECT_EQ(memory_stats(kGpu).in_use, base);
}

TEST(CudaGraph, AHostSyncInsideTheCaptureIsAClearError) {
  FREIGHT_SKIP_WITHOUT_CUDA();
  size_t base = memory_stats(kGpu).in_use;
  Tensor a = Tensor::ones({8}, DType::F32, kGpu);
  try {
    backend_for(DeviceType::CUDA).capture(0, [&] { (void)sum(a).item(); });
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("CUDA graph"), std::string::npos) << m;
    EXPECT_NE(m.find("--no-cuda-graph"), std::string::npos) << m;
  }
  // The device is usable afterwards and the failed capture's pool is gone.
  EXPECT_EQ(sum(a).item(), 8.0);
  a = Tensor();
  EXPECT_EQ(memory_stats(kGpu).in_use, base);
}

// A library error inside the captured step (cuDNN refusing a call under capture, say) names the
// capture and the way out, and the device stays usable.
TEST(CudaGraph, ALibraryErrorInsideTheCaptureNamesTheWayOut) {
  FREIGHT_SKIP_WITHOUT_CUDA();
  size_t base = memory_stats(kGpu).in_use;
  Tensor a = Tensor::ones({8}, DType::F32, kGpu);
  try {
    backend_for(DeviceType::CUDA).capture(0, [&] {
      (void)add(a, a);
      throw Error("cudnnConvolutionBackwardFilter failed: CUDNN_STATUS_NOT_SUPPORTED");
    });
    FAIL() << "expected an error";
  } catch (const OutOfMemoryError&) {
    FAIL() << "the error changed type";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("CUDNN_STATUS_NOT_SUPPORTED"), std::string::npos) << m;
    EXPECT_NE(m.find("while capturing a CUDA graph"), std::string::npos) << m;
    EXPECT_NE(m.find("--no-cuda-graph"), std::string::npos) << m;
  }
  EXPECT_EQ(sum(a).item(), 8.0);
  a = Tensor();
  EXPECT_EQ(memory_stats(kGpu).in_use, base);
}

// ---------------------------------------------------------------- training runs
class CudaTraining : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("freight_gpu_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
    model_ = (dir_ / "small.json").string();
    // Dropout, batch norm, AdamW and a one-cycle schedule: every piece of host state that a
    // replay must reproduce.
    std::ofstream(model_) << R"({
      "name": "small", "input": {"shape": [1, 4, 4]}, "classes": 4,
      "layers": [{"type": "flatten"}, {"type": "linear", "out": 24}, {"type": "batchnorm"},
                 {"type": "relu"}, {"type": "dropout", "p": 0.2}, {"type": "linear", "out": 4}],
      "train": {"dataset": "synthetic", "batch_size": 32, "optimizer": "adamw", "lr": 0.01,
                "schedule": "onecycle"}})";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  TrainOptions options(const std::string& save) {
    TrainOptions o;
    o.model = model_;
    o.device = "cuda";
    o.epochs = 2;
    o.seed = 9;
    o.limit_train = 200;  // 7 batches, the last one ragged (8 samples)
    o.limit_test = 64;
    o.save = save;
    return o;
  }
  std::filesystem::path dir_;
  std::string model_;
};

void expect_same_checkpoints(const std::string& a_path, const std::string& b_path) {
  io::SafetensorsFile a = io::load_safetensors(a_path), b = io::load_safetensors(b_path);
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    EXPECT_EQ(a.tensors[i].first, b.tensors[i].first);
    EXPECT_EQ(a.tensors[i].second.to_double_vector(), b.tensors[i].second.to_double_vector())
        << a.tensors[i].first;
  }
  io::SafetensorsFile sa = io::load_safetensors(a_path + ".train");
  io::SafetensorsFile sb = io::load_safetensors(b_path + ".train");
  EXPECT_EQ(sa.metadata.at("step"), sb.metadata.at("step"));
  EXPECT_EQ(sa.metadata.at("rng_offset"), sb.metadata.at("rng_offset"));
  EXPECT_EQ(sa.metadata.at("lr"), sb.metadata.at("lr"));
  ASSERT_EQ(sa.tensors.size(), sb.tensors.size());
  for (size_t i = 0; i < sa.tensors.size(); ++i)
    EXPECT_EQ(sa.tensors[i].second.to_double_vector(), sb.tensors[i].second.to_double_vector())
        << sa.tensors[i].first;
}

TEST_F(CudaTraining, GraphReplayAndDataOnDeviceEqualEagerTraining) {
  FREIGHT_SKIP_WITHOUT_CUDA();
  SKIP_WITHOUT_CUDA_KERNEL(adam_step);
  SKIP_WITHOUT_CUDA_KERNEL(batch_norm_forward);
  std::string eager = (dir_ / "eager.safetensors").string();
  std::string graph = (dir_ / "graph.safetensors").string();
  std::string resident = (dir_ / "resident.safetensors").string();
  TrainOptions o = options(eager);
  o.cuda_graph = false;
  TrainResult re = train(o);
  o = options(graph);
  TrainResult rg = train(o);
  o = options(resident);
  o.data_on_device = true;
  TrainResult rr = train(o);
  ASSERT_EQ(rg.epochs.size(), 2u);
  EXPECT_EQ(re.epochs[0].graph_steps, 0);
  // Epoch 1: 3 eager warm-up steps, the capture, 2 replays, the ragged batch eagerly.
  EXPECT_EQ(rg.epochs[0].graph_steps, 3);
  EXPECT_EQ(rg.epochs[1].graph_steps, 6);
  for (size_t e = 0; e < 2; ++e) {
    EXPECT_EQ(rg.epochs[e].train_loss, re.epochs[e].train_loss) << "epoch " << e + 1;
    EXPECT_EQ(rg.epochs[e].train_accuracy, re.epochs[e].train_accuracy);
    EXPECT_EQ(rg.epochs[e].test_loss, re.epochs[e].test_loss);
    EXPECT_EQ(rr.epochs[e].train_loss, re.epochs[e].train_loss) << "epoch " << e + 1;
  }
  expect_same_checkpoints(eager, graph);
  expect_same_checkpoints(eager, resident);
}

TEST_F(CudaTraining, ResumingAGraphRunIsExact) {
  FREIGHT_SKIP_WITHOUT_CUDA();
  SKIP_WITHOUT_CUDA_KERNEL(adam_step);
  SKIP_WITHOUT_CUDA_KERNEL(batch_norm_forward);
  // A step schedule, whose curve (unlike one-cycle's) does not depend on the number of epochs,
  // so 2 epochs in one run and 1 + 1 resumed must give the same bits, graphs and all.
  std::ofstream(model_) << R"({
      "name": "small", "input": {"shape": [1, 4, 4]}, "classes": 4,
      "layers": [{"type": "flatten"}, {"type": "linear", "out": 24}, {"type": "batchnorm"},
                 {"type": "relu"}, {"type": "dropout", "p": 0.2}, {"type": "linear", "out": 4}],
      "train": {"dataset": "synthetic", "batch_size": 32, "optimizer": "adamw", "lr": 0.01,
                "schedule": "step", "step_size": 1, "gamma": 0.5}})";
  std::string straight = (dir_ / "straight.safetensors").string();
  std::string split = (dir_ / "split.safetensors").string();
  train(options(straight));
  TrainOptions a = options(split);
  a.epochs = 1;
  train(a);
  TrainOptions b = options(split);
  b.resume = split;
  TrainResult r = train(b);
  ASSERT_EQ(r.epochs.size(), 1u);
  EXPECT_GT(r.epochs[0].graph_steps, 0);
  expect_same_checkpoints(straight, split);
}

TEST(CudaPrecision, Tf32AndBf16GemmsStayCloseToFp32) {
  FREIGHT_SKIP_WITHOUT_CUDA();
  Generator g(12);
  Tensor a = Tensor::normal({67, 129}, 0, 1, DType::F32, kGpu, &g);
  Tensor b = Tensor::normal({129, 33}, 0, 1, DType::F32, kGpu, &g);
  Tensor a3 = Tensor::normal({3, 17, 40}, 0, 1, DType::F32, kGpu, &g);
  Tensor b3 = Tensor::normal({3, 40, 9}, 0, 1, DType::F32, kGpu, &g);
  Precision before = precision();
  set_precision(Precision::FP32);
  Tensor ref = matmul(a, b), ref3 = matmul(a3, b3);
  for (auto [p, tol] : {std::pair{Precision::TF32, 5e-3}, std::pair{Precision::BF16, 2e-2}}) {
    set_precision(p);
    Tensor c = matmul(a, b), c3 = matmul(a3, b3);
    EXPECT_EQ(c.dtype(), DType::F32);
    EXPECT_LT(relative_error(c, ref), tol) << precision_name(p);
    EXPECT_LT(relative_error(c3, ref3), tol) << precision_name(p) << " batched";
    if (p == Precision::BF16) {
      EXPECT_GT(relative_error(c, ref), 0.0) << "bf16 inputs lose bits: the path was taken";
    }
  }
  set_precision(before);
}

// ---------------------------------------------------------------- real data (GPU only)
TEST(CudaE2e, MlpOnFashionMnistLandsInTheCpuBand) {
  FREIGHT_SKIP_WITHOUT_CUDA();
  if (emulated()) GTEST_SKIP() << "too slow under the emulation";
  SKIP_WITHOUT_CUDA_KERNEL(sgd_step);
  if (!std::filesystem::exists(data::default_data_dir("fashion-mnist")))
    GTEST_SKIP() << "Fashion-MNIST is not installed";
  for (bool resident : {false, true}) {
    TrainOptions o;
    o.model = "mlp";
    o.data = "fashion-mnist";
    o.device = "cuda";
    o.epochs = 2;
    o.batch_size = 64;
    o.limit_train = 12000;
    o.limit_test = 2000;
    o.data_on_device = resident;
    TrainResult r = train(o);
    // The CPU test (tests/e2e/fashion_mlp_test.cpp) asks >= 80% of the same run.
    EXPECT_GE(r.epochs.back().test_accuracy, 0.80) << "data on device: " << resident;
    EXPECT_LT(r.epochs.back().train_loss, r.epochs.front().train_loss);
    EXPECT_GT(r.epochs.back().graph_steps, 0);
  }
}

TEST(CudaE2e, FashionCnnShortRunLandsInTheCpuBand) {
  FREIGHT_SKIP_WITHOUT_CUDA();
  if (emulated()) GTEST_SKIP() << "too slow under the emulation";
  SKIP_WITHOUT_CUDA_KERNEL(conv2d_forward);
  SKIP_WITHOUT_CUDA_KERNEL(batch_norm_forward);
  SKIP_WITHOUT_CUDA_KERNEL(max_pool2d_forward);
  SKIP_WITHOUT_CUDA_KERNEL(adam_step);
  if (!std::filesystem::exists(data::default_data_dir("fashion-mnist")))
    GTEST_SKIP() << "Fashion-MNIST is not installed";
  for (const char* precision : {"fp32", "bf16"}) {
    TrainOptions o;
    o.model = "fashion-cnn";
    o.device = "cuda";
    o.epochs = 1;
    o.limit_train = 12000;
    o.limit_test = 2000;
    o.data_on_device = true;
    o.precision = precision;
    TrainResult r = train(o);
    // The same run on the CPU reaches about 86% (see docs/gpu-training.md); the band allows
    // for reduced precision and a different order of floating-point sums.
    EXPECT_GE(r.epochs.back().test_accuracy, 0.82) << precision;
    EXPECT_LE(r.epochs.back().test_accuracy, 0.95) << precision;
  }
}

}  // namespace
}  // namespace freight::test
