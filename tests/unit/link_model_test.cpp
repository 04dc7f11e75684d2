// The all-reduce time model of data parallelism (freight/plan.h: LinkPeaks). The GPU scaling
// table of freight plan --nodes is checked in tests/timing/plan_test.cpp (it needs peaks).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "common/test_util.h"
#include "freight/plan.h"

namespace freight {
namespace {

TEST(LinkModel, RingFormula) {
  LinkPeaks l;
  l.latency_s = 1e-6;
  l.bus_bandwidth = 1e9;
  // 2(p - 1) steps of latency, 2(p - 1)/p of the bytes through each link.
  EXPECT_DOUBLE_EQ(l.all_reduce_seconds(1e6, 2), 2 * 1e-6 + 1.0 * 1e6 / 1e9);
  EXPECT_DOUBLE_EQ(l.all_reduce_seconds(1e6, 4), 6 * 1e-6 + 1.5 * 1e6 / 1e9);
  EXPECT_EQ(l.all_reduce_seconds(1e6, 1), 0.0);
}

TEST(LinkModel, MeasuredTimesInterpolateOnALogScale) {
  LinkPeaks l = link_from_measurement({{1e6, 1e-3}, {4, 4e-6}, {1e4, 1e-5}}, 2, 1);
  EXPECT_EQ(l.kind, "mpi, 1 host");
  EXPECT_DOUBLE_EQ(l.all_reduce_seconds(4, 2), 4e-6);
  EXPECT_DOUBLE_EQ(l.all_reduce_seconds(1e6, 2), 1e-3);
  EXPECT_NEAR(l.all_reduce_seconds(1e5, 2), 1e-4, 1e-12);  // halfway in log between 1e4 and 1e6
  EXPECT_NEAR(l.all_reduce_seconds(4e6, 2), 4e-3, 1e-12);  // beyond: the last bandwidth
  // Latency per ring step from the smallest sum, bus bandwidth the best measured.
  EXPECT_DOUBLE_EQ(l.latency_s, 4e-6 / 2);
  EXPECT_DOUBLE_EQ(l.bus_bandwidth, 1e6 / 1e-3);
  // Another number of ranks: the ring with those figures.
  EXPECT_DOUBLE_EQ(l.all_reduce_seconds(1e6, 4), 6 * 2e-6 + 1.5 * 1e6 / 1e9);
}

TEST(LinkModel, SavedAndLoadedWithThePeaksCache) {
  test::ScopedPeaksFile file("link_model");
  LinkPeaks l = link_from_measurement({{4, 5e-6}, {1 << 20, 3e-4}}, 3, 1);
  l.measured_at = "2026-11-27T00:00:00Z";
  save_link(l, peaks_cache_path());
  LinkPeaks back;
  ASSERT_TRUE(load_link("mpi, 1 host", peaks_cache_path(), back));
  EXPECT_EQ(back.ranks, 3);
  EXPECT_EQ(back.times, l.times);
  EXPECT_EQ(back.measured_at, l.measured_at);
  EXPECT_FALSE(load_link("mpi, several hosts", peaks_cache_path(), back));
}

}  // namespace
}  // namespace freight
