// Whether the CPU threads share a cache (freight::measure_cache_sharing, freight/peaks.h), how
// `freight bench` reruns the rows measured while they did not (src/bench/cache_reruns.h) and how
// it marks those still apart (src/bench/report.cpp).
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/cache_reruns.h"
#include "bench/report.h"
#include "freight/peaks.h"
#include "freight/runtime.h"

namespace freight {
namespace {

CacheSharing sharing(double own, double cross) {
  CacheSharing c;
  c.measured = true;
  c.own_bytes_per_s = own;
  c.cross_bytes_per_s = cross;
  return c;
}

TEST(CacheSharing, TheRatioDecidesAndTheDescriptionSaysWhy) {
  const CacheSharing apart = sharing(60e9, 21e9), together = sharing(80e9, 72e9);
  EXPECT_NEAR(apart.ratio(), 0.35, 1e-12);
  EXPECT_FALSE(apart.shared());
  EXPECT_NE(apart.describe().find("apart"), std::string::npos) << apart.describe();
  EXPECT_NE(apart.describe().find("0.35x"), std::string::npos) << apart.describe();
  EXPECT_TRUE(together.shared());
  EXPECT_NE(together.describe().find("shared"), std::string::npos) << together.describe();
  // Just either side of the line.
  EXPECT_TRUE(sharing(100, 100 * kSharedCacheRatio).shared());
  EXPECT_FALSE(sharing(100, 100 * kSharedCacheRatio * 0.99).shared());
  // Nothing measured (one thread) is nothing to warn about.
  EXPECT_TRUE(CacheSharing().shared());
  EXPECT_NE(CacheSharing().describe().find("not measured"), std::string::npos);
}

TEST(CacheSharing, MeasuredOnTwoThreadsOnlyAndOutsideParallelRegions) {
  const int saved = num_threads();
  if (omp_get_num_procs() < 2) GTEST_SKIP() << "one processor: nothing to share";
  set_num_threads(2);
  const CacheSharing c = measure_cache_sharing();
  EXPECT_TRUE(c.measured);
  EXPECT_TRUE(std::isfinite(c.own_bytes_per_s) && c.own_bytes_per_s > 1e8) << c.describe();
  EXPECT_TRUE(std::isfinite(c.cross_bytes_per_s) && c.cross_bytes_per_s > 1e8) << c.describe();
  // Inside a team of two, one thread alone cannot run the measurement's barriers.
  bool inside_measured = true;
#pragma omp parallel num_threads(2)
  {
#pragma omp master
    inside_measured = measure_cache_sharing().measured;
  }
  EXPECT_FALSE(inside_measured);
  set_num_threads(1);
  EXPECT_FALSE(measure_cache_sharing().measured);
  set_num_threads(saved);
}

// A probe that returns the readings given, in order (then the last again), and counts its calls.
struct ScriptedProbe {
  std::vector<CacheSharing> readings;
  size_t calls = 0;
  CacheSharing operator()() {
    const CacheSharing c = readings.at(std::min(calls, readings.size() - 1));
    ++calls;
    return c;
  }
};

bench::RerunOptions quick_reruns(int reruns) {
  bench::RerunOptions o;
  o.reruns = reruns;
  o.wait_seconds = 0.05;
  o.poll_seconds = 0.001;
  return o;
}

TEST(CacheReruns, ARunWhileApartIsRepeatedUntilSharedOrTheRerunsRunOut) {
  const CacheSharing apart = sharing(60e9, 21e9), together = sharing(80e9, 72e9);
  int runs = 0;
  const auto run = [&](const bench::ReadNow&) { ++runs; };
  {  // shared around the first run: one run, one reading either side (a thread can read the
     // other's block a little faster than its own: the lowest is a reading, not capped at 1)
    const CacheSharing faster = sharing(80e9, 84e9);
    ScriptedProbe probe{{faster, faster}};
    const bench::SharedRun r =
        bench::run_with_shared_caches(quick_reruns(3), run, [&] { return probe(); });
    EXPECT_EQ(r.runs, 1);
    EXPECT_EQ(runs, 1);
    EXPECT_EQ(probe.calls, 2u);
    EXPECT_FALSE(r.apart());
    EXPECT_NEAR(r.lowest, faster.ratio(), 1e-12);
  }
  {  // apart at the end of the first run; the wait sees shared; the rerun stays shared
    runs = 0;
    ScriptedProbe probe{{together, apart, apart, together, together}};
    const bench::SharedRun r =
        bench::run_with_shared_caches(quick_reruns(3), run, [&] { return probe(); });
    EXPECT_EQ(r.runs, 2);
    EXPECT_EQ(runs, 2);
    EXPECT_FALSE(r.apart());
    EXPECT_TRUE(r.start.shared() && r.end.shared());
  }
  {  // shared at both ends of the first run but apart between its rounds: run again
    runs = 0;
    ScriptedProbe probe{{together, together, apart, together, together, together, together}};
    const auto with_rounds = [&](const bench::ReadNow& read_now) {
      ++runs;
      read_now();
      read_now();
    };
    const bench::SharedRun r =
        bench::run_with_shared_caches(quick_reruns(3), with_rounds, [&] { return probe(); });
    EXPECT_EQ(r.runs, 2);
    EXPECT_FALSE(r.apart());
    EXPECT_NEAR(r.lowest, together.ratio(), 1e-12);
  }
  {  // apart throughout: the first run and three reruns, the last kept and still apart
    runs = 0;
    ScriptedProbe probe{{apart}};
    const bench::SharedRun r =
        bench::run_with_shared_caches(quick_reruns(3), run, [&] { return probe(); });
    EXPECT_EQ(r.runs, 4);
    EXPECT_EQ(runs, 4);
    EXPECT_TRUE(r.apart());
  }
  {  // no reruns asked for: one run, marked apart
    runs = 0;
    ScriptedProbe probe{{apart}};
    const bench::SharedRun r =
        bench::run_with_shared_caches(quick_reruns(0), run, [&] { return probe(); });
    EXPECT_EQ(r.runs, 1);
    EXPECT_TRUE(r.apart());
  }
  {  // nothing measured (one thread, a GPU row): one run, no reading after it
    runs = 0;
    ScriptedProbe probe{{CacheSharing()}};
    const bench::SharedRun r =
        bench::run_with_shared_caches(quick_reruns(3), run, [&] { return probe(); });
    EXPECT_EQ(r.runs, 1);
    EXPECT_EQ(probe.calls, 1u);
    EXPECT_FALSE(r.end.measured);
    EXPECT_FALSE(r.apart());
  }
}

nlohmann::json report_doc(const nlohmann::json& rows) {
  return {{"freight", {{"version", "test"}, {"build", "test"}}},
          {"devices", nlohmann::json::array({{{"device", "cpu"}, {"description", "test cpu"}}})},
          {"settings",
           {{"precision", "fp32"},
            {"optimizer", "SGD"},
            {"seconds", 1.0},
            {"min_rounds", 3},
            {"warmup_seconds", 0.25},
            {"max_step_seconds", 5.0}}},
          {"rows", rows}};
}

nlohmann::json cpu_row(const std::string& model, int threads, nlohmann::json sharing) {
  nlohmann::json r = {{"model", model},     {"batch_size", 1}, {"device", "cpu"},
                      {"threads", threads}, {"status", "ok"},  {"median_ms", 1.0},
                      {"min_ms", 0.9},      {"max_ms", 1.1},   {"samples_per_s", 1000.0},
                      {"latency_ms", 0.5},  {"gflops", 1.0},   {"peak_memory_bytes", 1e6}};
  if (!sharing.is_null()) r["cache_sharing"] = sharing;
  return r;
}

TEST(BenchReport, RowsRunWhileTheThreadsWereApartAreMarked) {
  using nlohmann::json;
  const json rows = json::array({
      cpu_row("one", 1, nullptr),
      cpu_row("shared", 2, {{"start", 0.95}, {"end", 0.9}}),
      cpu_row("apart", 2, {{"start", 0.35}, {"end", 0.4}}),
      cpu_row("started", 2, {{"start", 0.3}, {"end", 0.9}}),
      cpu_row("ended", 2, {{"start", 0.9}, {"end", 0.3}}),
      cpu_row("within", 2, {{"start", 0.9}, {"end", 0.8}, {"lowest", 0.4}, {"runs", 1}}),
  });
  const std::string md = bench::markdown_report(report_doc(rows));
  EXPECT_NE(md.find("| one | 1 | cpu | 1 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| shared | 1 | cpu | 2 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| apart | 1 | cpu | 2, caches apart |"), std::string::npos) << md;
  EXPECT_NE(md.find("| started | 1 | cpu | 2, caches apart at the start |"), std::string::npos)
      << md;
  EXPECT_NE(md.find("| ended | 1 | cpu | 2, caches apart at the end |"), std::string::npos) << md;
  EXPECT_NE(md.find("| within | 1 | cpu | 2, caches apart within the row |"), std::string::npos)
      << md;
  EXPECT_NE(md.find("- \"caches apart\":"), std::string::npos) << md;

  // No row apart: no legend.
  const std::string quiet = bench::markdown_report(report_doc(json::array({rows[0], rows[1]})));
  EXPECT_EQ(quiet.find("caches apart"), std::string::npos) << quiet;
}

TEST(BenchReport, PyTorchRowsApartAreMarkedAndRerunsCounted) {
  using nlohmann::json;
  json rerun = cpu_row("rerun", 2, {{"start", 0.9}, {"end", 0.95}, {"runs", 2}});
  rerun["pytorch"] = {
      {"status", "ok"},   {"config", "2 threads, eager"},
      {"median_ms", 2.0}, {"min_ms", 1.9},
      {"max_ms", 2.1},    {"freight_over_pytorch", 0.5},
      {"speedup", 2.0},   {"cache_sharing", {{"start", 0.35}, {"end", 0.9}, {"runs", 4}}}};
  json doc = report_doc(json::array({rerun}));
  doc["settings"]["rerun_apart"] = 3;
  const std::string md = bench::markdown_report(doc);
  // In the table of all rows and in the one against PyTorch.
  const std::string cell = "| 2 threads, eager, caches apart at the start |";
  const size_t first = md.find(cell);
  ASSERT_NE(first, std::string::npos) << md;
  EXPECT_NE(md.find(cell, first + 1), std::string::npos) << md;
  EXPECT_NE(md.find("- \"caches apart\":"), std::string::npos) << md;
  EXPECT_NE(md.find("--rerun-apart 3: "), std::string::npos) << md;
  EXPECT_NE(md.find("2 rows took more than one run"), std::string::npos) << md;
  // Without --rerun-apart the report says nothing of reruns.
  doc["settings"].erase("rerun_apart");
  EXPECT_EQ(bench::markdown_report(doc).find("--rerun-apart"), std::string::npos);
}

}  // namespace
}  // namespace freight
