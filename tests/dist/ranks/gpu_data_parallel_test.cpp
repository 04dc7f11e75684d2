// Data parallelism on GPUs: each rank on the GPU of its local rank, the gradients summed by NCCL
// on a stream of its own. Skipped without a GPU. The CPU emulation of CUDA runs these under
// `mpirun -np 2` with two emulated devices and its NCCL over MPI (tests/cuda/emulation/run.sh),
// where the comm stream's wait for backward's kernels is what the sums' correctness rests on:
// without it a sum reads a bucket before backward wrote it in some interleaving. On a real GPU
// outside mpirun they run as a world of one (a real one-rank NCCL communicator). The link
// measurement of `freight devices --measure --nproc N` on GPUs is here too.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "common/test_util.h"
#include "dist/model_check.h"
#include "dist/reducer.h"
#include "freight/freight.h"
#include "freight/training.h"
#include "rank_test_util.h"

namespace freight {
namespace {

Device rank_gpu() {
  return Device::cuda(dist::world().local_rank);
}

// Rank r's gradient of each parameter p is (r + 1)·p: the buckets must hold N(N + 1)/2 · p,
// in one bucket summed after backward, in small buckets started while backward runs, and in the
// default's, three steps each (the buckets start from zero every step).
TEST(GpuReducer, BucketsSumOverRanks) {
  FREIGHT_SKIP_WITHOUT_CUDA();
  const dist::WorldInfo& w = dist::world();
  ASSERT_LT(w.local_rank, cuda_device_count()) << "one GPU per rank";
  const double factor = w.size * (w.size + 1) / 2.0;
  for (int64_t bucket_bytes : {int64_t(0), int64_t(4096), int64_t(25) << 20}) {
    Generator g(1);
    std::vector<Tensor> params, host;
    for (Shape s : {Shape{300, 7}, Shape{7}, Shape{50, 300}, Shape{50}, Shape{3, 3, 3}}) {
      host.push_back(Tensor::normal(s, 0, 1, DType::F32, Device::cpu(), &g));
      params.push_back(host.back().to(rank_gpu()).set_requires_grad());
    }
    dist::Reducer reducer(params, bucket_bytes);
    for (int step = 0; step < 3; ++step) {
      reducer.prepare();
      Tensor loss = Tensor::scalar(0.0, DType::F32, rank_gpu());
      for (const Tensor& p : params) loss = loss + sum(p * p) * (0.5 * double(w.rank + 1));
      loss.backward();
      reducer.finish(step);
      for (size_t k = 0; k < params.size(); ++k) {
        std::vector<float> got = params[k].grad().to(Device::cpu()).to_float_vector();
        std::vector<float> p = host[k].to_float_vector();
        size_t wrong = 0;
        for (size_t i = 0; i < got.size(); ++i)
          if (std::abs(double(got[i]) - factor * double(p[i])) > 1e-5 * (1 + std::abs(p[i])))
            ++wrong;
        EXPECT_EQ(wrong, 0u) << "parameter " << k << ", bucket bytes " << bucket_bytes << ", step "
                             << step << ": " << wrong << " of " << got.size()
                             << " gradients are not the sum over the ranks";
      }
    }
    if (bucket_bytes == 4096) {
      EXPECT_GT(reducer.num_buckets(), 2u);
    }
  }
}

// train() on N GPU ranks reaches the weights of one process on the whole batch (on the GPU too),
// with a short last batch (200 samples in batches of 64: 8 rows left), and the ranks agree bit
// for bit. Synthetic data: no dataset needed.
TEST(GpuDataParallel, RanksEqualOneProcessOnTheGlobalBatch) {
  FREIGHT_SKIP_WITHOUT_CUDA();
  const dist::WorldInfo& w = dist::world();
  for (int bucket_mb : {0, 1}) {
    SCOPED_TRACE(fmt::format("mlp, {} ranks, --bucket-mb {}", w.size, bucket_mb));
    TrainOptions o;
    o.model = "mlp";
    o.data = "synthetic";
    o.limit_train = 200;
    o.limit_test = 64;
    o.batch_size = 64;
    o.epochs = 1;
    o.optimizer = "sgd";
    o.lr = 0.05;
    o.momentum = 0.9;
    o.schedule = "none";
    o.seed = 5;
    o.threads = 1;
    o.device = "cuda";
    o.cuda_graph = false;
    o.bucket_mb = bucket_mb;
    o.distributed = false;
    TrainResult one = train(o);  // one process on cuda:0, on every rank alike
    o.distributed = true;
    TrainResult job = train(o);
    EXPECT_EQ(job.device, w.size > 1 ? rank_gpu() : Device::cuda(0));
    dist::NamedTensorList ref, got, rank0;
    for (const auto& [name, t] : one.model->state_dict())
      ref.emplace_back(name, t.to(Device::cpu()));
    for (const auto& [name, t] : job.model->state_dict()) {
      got.emplace_back(name, t.to(Device::cpu()));
      rank0.emplace_back(name, test::from_rank0(got.back().second));
    }
    const double scale = std::max(1.0, test::max_abs_value(ref));
    EXPECT_LE(test::max_abs_difference(got, ref), 1e-5 * scale);
    EXPECT_EQ(test::max_abs_difference(got, rank0), 0.0) << "the ranks' weights differ";
    ASSERT_EQ(job.epochs.size(), 1u);
    EXPECT_NEAR(job.epochs[0].train_loss, one.epochs[0].train_loss, 1e-5);
  }
}

// `freight devices --measure --nproc N` on GPUs: NCCL's sums of device memory, timed at each size
// until the device has finished them (a world of one measures nothing).
TEST(GpuLink, NcclSumsAreTimedAtEachSize) {
  FREIGHT_SKIP_WITHOUT_CUDA();
  const dist::WorldInfo& w = dist::world();
  std::vector<dist::AllReduceTiming> t = dist::measure_all_reduce({4, 4096, 1 << 20}, rank_gpu());
  if (w.size == 1) {
    EXPECT_TRUE(t.empty());
    return;
  }
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[2].bytes, 1 << 20);
  for (const dist::AllReduceTiming& x : t) {
    EXPECT_GT(x.seconds, 0);
    EXPECT_GT(x.bus_bytes_per_second, 0);
  }
}

}  // namespace
}  // namespace freight
