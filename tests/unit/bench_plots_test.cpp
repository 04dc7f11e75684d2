// The plots of `freight bench` (src/bench/report.cpp) take device and model names from the
// document, which a user can edit or a device can report: gnuplot must draw them as text and run
// nothing (skipped when gnuplot is not installed).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/report.h"
#include "bench/subprocess.h"

namespace freight::bench {
namespace {

namespace fs = std::filesystem;

TEST(BenchPlots, HostileNamesAreDrawnAndRunNothing) {
  if (!program_in_path("gnuplot")) GTEST_SKIP() << "gnuplot is not installed (gnuplot-nox)";
  fs::path dir = fs::temp_directory_path() / ("freight_bench_plots_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  using nlohmann::json;
  // Each name would create a file in `dir` (where gnuplot runs) if anything expanded it.
  const std::string device = "CPU `touch c1` @M\nsystem \"touch c2\"";
  const std::vector<std::string> models = {"m`touch c3`", "two words\nsystem \"touch c4\"",
                                           "q\"uote's"};
  json rows = json::array();
  for (const std::string& m : models)
    for (int threads : {1, 2})
      rows.push_back({{"model", m},
                      {"batch_size", 8},
                      {"device", "cpu"},
                      {"threads", threads},
                      {"status", "ok"},
                      {"median_ms", 4.0 / threads},
                      {"latency_ms", 0.5},
                      {"samples_per_s", 2000.0 * threads}});
  json doc = {{"devices", {{{"device", "cpu"}, {"name", device}}}}, {"rows", rows}};
  std::vector<std::string> notes;
  std::vector<std::string> images = write_plots(doc, dir.string(), "b`touch c5`", notes);
  for (const std::string& n : notes) ADD_FAILURE() << "note: " << n;
  EXPECT_EQ(images.size(), 4u);
  for (const std::string& i : images) EXPECT_TRUE(fs::exists(dir / i)) << i;
  for (const char* c : {"c1", "c2", "c3", "c4", "c5"})
    EXPECT_FALSE(fs::exists(dir / c)) << c << " was created: gnuplot ran a command";
  fs::remove_all(dir);
}

}  // namespace
}  // namespace freight::bench
