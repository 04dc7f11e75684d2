#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "freight/data/loader.h"
#include "freight/freight.h"

namespace freight::data {
namespace {

Dataset numbered(int64_t n) {
  // Sample i is a 1x2 "image" of pixels (i, 255) with label i % 10.
  Dataset d;
  d.name = "numbered";
  d.num_classes = 10;
  d.inputs = Tensor::empty({n, 1, 2}, DType::U8);
  std::vector<int64_t> labels(n);
  for (int64_t i = 0; i < n; ++i) {
    d.inputs.data<uint8_t>()[2 * i] = uint8_t(i);
    d.inputs.data<uint8_t>()[2 * i + 1] = 255;
    labels[i] = i % 10;
  }
  d.labels = Tensor::from_vector(labels, {n});
  return d;
}

std::vector<int64_t> epoch_order(Loader& loader, int64_t epoch) {
  loader.start_epoch(epoch);
  std::vector<int64_t> ids;
  Batch b;
  while (loader.next(b)) {
    std::vector<float> x = b.inputs.to_float_vector();
    for (size_t i = 0; i < x.size(); i += 2) ids.push_back(int64_t(std::lround(x[i] * 255)));
  }
  return ids;
}

TEST(Loader, EveryEpochIsAPermutationAndSeedsReproduce) {
  Dataset d = numbered(103);
  LoaderOptions o;
  o.batch_size = 10;
  o.seed = 5;
  Loader a(d, o), b(d, o);
  EXPECT_EQ(a.num_batches(), 11);
  std::vector<int64_t> e0 = epoch_order(a, 0), e1 = epoch_order(a, 1);
  ASSERT_EQ(e0.size(), 103u);
  EXPECT_EQ(std::set<int64_t>(e0.begin(), e0.end()).size(), 103u);
  EXPECT_NE(e0, e1) << "epochs are shuffled differently";
  EXPECT_EQ(epoch_order(b, 1), e1) << "the order of an epoch depends only on (seed, epoch)";
  std::vector<int64_t> sorted = e0;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_NE(e0, sorted);
}

TEST(Loader, NormalisesAndKeepsLabelsAligned) {
  Dataset d = numbered(20);
  LoaderOptions o;
  o.batch_size = 8;
  o.mean = 0.5;
  o.std = 0.25;
  o.drop_last = true;
  Loader l(d, o);
  EXPECT_EQ(l.num_batches(), 2);
  l.start_epoch(0);
  Batch b;
  int batches = 0;
  while (l.next(b)) {
    ++batches;
    EXPECT_EQ(b.inputs.shape(), (Shape{8, 1, 2}));
    std::vector<float> x = b.inputs.to_float_vector();
    std::vector<int64_t> y = b.labels.to_int_vector();
    for (int i = 0; i < 8; ++i) {
      double pixel = x[2 * i] * 0.25 + 0.5;  // undo the normalisation
      int64_t id = std::lround(pixel * 255);
      EXPECT_EQ(y[i], id % 10);
      EXPECT_NEAR(x[2 * i + 1], (1.0 - 0.5) / 0.25, 1e-5);
    }
  }
  EXPECT_EQ(batches, 2);
}

TEST(Loader, SynchronousModeMatchesPrefetch) {
  Dataset d = numbered(37);
  LoaderOptions o;
  o.batch_size = 6;
  o.seed = 9;
  Loader a(d, o);
  o.prefetch = 0;
  Loader b(d, o);
  EXPECT_EQ(epoch_order(a, 3), epoch_order(b, 3));
}

// A run resumed after batch k of an epoch sees the rest of that epoch's batches, in the order
// the interrupted run would have (prefetching and synchronous alike).
TEST(Loader, StartingAnEpochAtBatchKGivesTheRestOfThatEpoch) {
  Dataset d = numbered(37);
  LoaderOptions o;
  o.batch_size = 6;
  o.seed = 9;
  for (int prefetch : {2, 0}) {
    o.prefetch = prefetch;
    Loader l(d, o);
    std::vector<int64_t> whole = epoch_order(l, 2);
    for (int64_t k : {0, 1, 4, 6, 7}) {
      l.start_epoch(2, k);
      std::vector<int64_t> rest;
      Batch b;
      int64_t first_index = -1;
      while (l.next(b)) {
        if (first_index < 0) first_index = b.index;
        std::vector<float> x = b.inputs.to_float_vector();
        for (size_t i = 0; i < x.size(); i += 2) rest.push_back(int64_t(std::lround(x[i] * 255)));
      }
      std::vector<int64_t> want(whole.begin() + std::min<int64_t>(6 * k, 37), whole.end());
      EXPECT_EQ(rest, want) << "prefetch " << prefetch << ", starting at batch " << k;
      if (k < 7) {
        EXPECT_EQ(first_index, k);
      }
    }
    EXPECT_THROW(l.start_epoch(2, 8), Error) << "past the epoch's last batch";
  }
}

TEST(Loader, BadOptionsAreClearErrors) {
  Dataset d = numbered(5);
  LoaderOptions o;
  o.batch_size = 0;
  EXPECT_THROW(Loader(d, o), Error);
  o.batch_size = 10;
  o.drop_last = true;
  EXPECT_THROW(Loader(d, o), Error);
}

}  // namespace
}  // namespace freight::data

namespace freight::data {
namespace {

// Data parallelism: every rank's loader yields its shard of each global batch; in rank order
// the shards are the batch one process would see, whatever the number of ranks, a last batch
// with fewer rows than ranks (some shards empty) included.
TEST(Loader, ShardsOfAGlobalBatchConcatenateToIt) {
  Dataset d = numbered(97);  // batches of 32: 32, 32, 32, 1
  LoaderOptions o;
  o.batch_size = 32;
  o.seed = 4;
  Loader whole(d, o);
  whole.start_epoch(1);
  std::vector<std::vector<int64_t>> want;
  Batch b;
  while (whole.next(b)) {
    std::vector<float> x = b.inputs.to_float_vector();
    want.emplace_back();
    for (size_t i = 0; i < x.size(); i += 2)
      want.back().push_back(int64_t(std::lround(x[i] * 255)));
  }
  for (int shards : {1, 2, 3}) {
    for (int prefetch : {2, 0}) {
      std::vector<std::vector<int64_t>> got(want.size());
      for (int r = 0; r < shards; ++r) {
        LoaderOptions so = o;
        so.shard = r;
        so.shards = shards;
        so.prefetch = prefetch;
        Loader l(d, so);
        ASSERT_EQ(l.num_batches(), whole.num_batches());
        l.start_epoch(1);
        for (size_t k = 0; l.next(b); ++k) {
          EXPECT_EQ(b.inputs.size(0), shard_of(int64_t(want[k].size()), r, shards).rows);
          EXPECT_EQ(b.labels.size(0), b.inputs.size(0));
          std::vector<float> x = b.inputs.to_float_vector();
          for (size_t i = 0; i < x.size(); i += 2)
            got[k].push_back(int64_t(std::lround(x[i] * 255)));
        }
      }
      EXPECT_EQ(got, want) << shards << " shards, prefetch " << prefetch;
    }
  }
}

TEST(Loader, ShardRowsSplitEvenlyAndRefuseAGlobalBatchBelowTheRanks) {
  EXPECT_EQ(shard_of(10, 0, 3).offset, 0);
  EXPECT_EQ(shard_of(10, 0, 3).rows, 4);
  EXPECT_EQ(shard_of(10, 1, 3).offset, 4);
  EXPECT_EQ(shard_of(10, 1, 3).rows, 3);
  EXPECT_EQ(shard_of(10, 2, 3).offset, 7);
  EXPECT_EQ(shard_of(1, 2, 3).rows, 0);
  EXPECT_THROW(shard_of(10, 3, 3), Error);
  LoaderOptions o;
  o.batch_size = 2;
  o.shard = 0;
  o.shards = 3;
  try {
    Loader l(numbered(10), o);
    FAIL() << "a global batch of 2 over 3 ranks was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--batch-size 2"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace freight::data
