// Timing statistics and the lab's outputs: a Markdown table (variant × shape, GFLOP/s and the
// fraction of the library) and a gnuplot chart of GFLOP/s against size (PNG and SVG). Shared by
// the CPU and CUDA labs.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "gemm_cpu.h"

namespace gemm_lab {

// Seconds per run: median of the timed repetitions, and how many there were.
struct Timing {
  double median_s = 0, min_s = 0, max_s = 0;
  int reps = 0;
};

// Times `run` (which was already run once, for validation): one more untimed warm-up run unless
// a single run is slower than `budget_s` (the validation run warmed the caches already), then at
// least `min_reps` and at most `max_reps` timed runs, stopping early once `budget_s` is spent.
Timing time_runs(const std::function<void()>& run, int min_reps, int max_reps, double budget_s);

// The median of a list of seconds.
Timing summarize(std::vector<double> seconds);

// "1024" for a square shape, "64x512x784" (m x n x k) otherwise.
std::string shape_label(const Shape& s);
bool is_square(const Shape& s);

// One measured cell: GFLOP/s, or a note instead ("FAILED", "skipped").
struct Cell {
  double gflops = -1;  // < 0: not measured
  std::string note;
};

struct Series {
  std::string name;         // "(4) packed, 14x32 micro-kernel"
  int threads = 1;          // the library row it is compared with has the same thread count
  bool library = false;     // a library row (OpenBLAS, cuBLAS): the 100% of its thread count
  std::vector<Cell> cells;  // one per shape
  std::string color;        // for the chart ("#e69f00"); a multi-thread series is dashed
};

struct Results {
  std::vector<Shape> shapes;
  std::vector<std::string> shape_notes;  // a word on each non-square shape, for the caption
  std::vector<Series> series;
  // The library series that `s` is compared with (same thread count), or nullptr.
  const Series* library_for(const Series& s) const;
};

// Variant × shape: "GFLOP/s (percent of the library with the same thread count)".
std::string markdown_table(const Results& r);
// Variant × shape: percent of the peak for the variant's thread count.
std::string markdown_peak_table(const Results& r, const std::function<double(int)>& peak);

// Writes DIR/STEM.dat and DIR/STEM.gp and runs gnuplot on them to make DIR/STEM.png and
// DIR/STEM.svg: GFLOP/s against the square sizes, one line per series, log-log, with dashed
// lines at the given peaks. Returns false (with a message on stderr) when gnuplot fails.
struct PeakLine {
  std::string label;
  double gflops;
  std::string color = "#808080";
};
bool write_plot(const Results& r, const std::string& dir, const std::string& stem,
                const std::string& title, const std::vector<PeakLine>& peaks);

// The system load (1, 5 and 15 minute averages from /proc/loadavg), for the report.
std::string load_average();

}  // namespace gemm_lab
