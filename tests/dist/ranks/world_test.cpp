// The world, the collectives, the gradient reducer and the same-model check, on every rank of
// `mpirun -np N` (N = 1, 2, 3: tests/CMakeLists.txt).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdlib>

#include "common/test_util.h"
#include "dist/communicator.h"
#include "dist/model_check.h"
#include "dist/reducer.h"
#include "freight/freight.h"
#include "freight/nn/model_file.h"
#include "freight/training.h"
#include "rank_test_util.h"

namespace freight {
namespace {

TEST(World, RanksAndLocalRanksMatchTheLauncher) {
  const dist::WorldInfo& w = dist::world();
  const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
  const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  ASSERT_TRUE(size && rank && local) << "run these tests under mpirun";
  EXPECT_TRUE(w.mpi);
  EXPECT_EQ(w.size, std::atoi(size));
  EXPECT_EQ(w.rank, std::atoi(rank));
  EXPECT_EQ(w.local_rank, std::atoi(local));
  std::vector<std::string> all = dist::all_gather_text("rank " + std::to_string(w.rank), "test");
  ASSERT_EQ(int(all.size()), w.size);
  for (int r = 0; r < w.size; ++r) EXPECT_EQ(all[size_t(r)], "rank " + std::to_string(r));
  std::vector<double> v{double(w.rank + 1), double(w.rank)};
  dist::all_reduce_sum(v, "test");
  EXPECT_EQ(v[0], w.size * (w.size + 1) / 2.0);
  std::vector<double> m{double(w.rank)};
  dist::all_reduce_max(m, "test");
  EXPECT_EQ(m[0], w.size - 1);
}

// Every rank's gradient of the parameters is rank + 1: the buckets must hold the sum over the
// ranks, N(N+1)/2, for every parameter, whatever the bucket size (one bucket after backward, many
// small ones started during backward, the default).
TEST(Reducer, BucketsSumOverRanks) {
  const dist::WorldInfo& w = dist::world();
  const double want = w.size * (w.size + 1) / 2.0;
  for (int64_t bucket_bytes : {int64_t(0), int64_t(4096), int64_t(25) << 20}) {
    Generator g(1);
    std::vector<Tensor> params;
    for (Shape s : {Shape{300, 7}, Shape{7}, Shape{50, 300}, Shape{50}, Shape{3, 3, 3}})
      params.push_back(Tensor::normal(s, 0, 1, DType::F32, Device::cpu(), &g).set_requires_grad());
    dist::Reducer reducer(params, bucket_bytes);
    for (int step = 0; step < 2; ++step) {  // twice: the buckets start from zero each step
      reducer.prepare();
      Tensor loss = Tensor::scalar(0.0);
      for (const Tensor& p : params) loss = loss + sum(p) * double(w.rank + 1);
      loss.backward();
      reducer.finish(step);
      for (size_t k = 0; k < params.size(); ++k) {
        std::vector<float> grad = params[k].grad().to_float_vector();
        for (float x : grad)
          ASSERT_EQ(x, want) << "parameter " << k << ", bucket bytes " << bucket_bytes << ", step "
                             << step;
      }
    }
    if (bucket_bytes == 4096) {
      EXPECT_GT(reducer.num_buckets(), 2u);
      if (w.size > 1) {
        EXPECT_GT(reducer.started_during_backward(), 0) << "no bucket overlapped backward";
      }
    }
    if (bucket_bytes == 0) {
      EXPECT_EQ(reducer.num_buckets(), 1u);
    }
  }
}

TEST(ModelCheck, NamesTheFirstDifferenceOnEveryRank) {
  const dist::WorldInfo& w = dist::world();
  manual_seed(1);
  nn::ModelSpec spec = nn::load_model_spec("lenet5");
  nn::ModulePtr model = nn::build_model(spec);
  dist::NamedTensorList state = model->state_dict();
  // The same on every rank: no error.
  EXPECT_EQ(test::error_of([&] { dist::check_same_model(state, "lr 0.1"); }), "");
  if (w.size == 1) return;
  // Rank 1 has another shape of one tensor.
  dist::NamedTensorList other = state;
  if (w.rank == 1) other[2].second = Tensor::zeros({7, 3});
  std::string e = test::error_of([&] { dist::check_same_model(other, "lr 0.1"); });
  EXPECT_TRUE(test::has(e, "rank 1 built a different model than rank 0: '" + state[2].first +
                               "' is float32 [7, 3] there, float32 " +
                               shape_str(state[2].second.shape()) + " on rank 0"))
      << e;
  // Other settings.
  e = test::error_of([&] { dist::check_same_model(state, w.rank == 1 ? "lr 0.2" : "lr 0.1"); });
  EXPECT_TRUE(test::has(e,
                        "rank 1 runs with other settings than rank 0: lr 0.2 there, lr 0.1 on "
                        "rank 0"))
      << e;
  // A missing tensor.
  dist::NamedTensorList fewer = state;
  if (w.rank == w.size - 1) fewer.pop_back();
  e = test::error_of([&] { dist::check_same_model(fewer, "lr 0.1"); });
  EXPECT_TRUE(
      test::has(e, fmt::format("rank {} built a different model than rank 0: it has no '{}'",
                               w.size - 1, state.back().first)))
      << e;
}

}  // namespace
}  // namespace freight
