#include "report.h"

#include "bench/gnuplot.h"
#include "bench/subprocess.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace gemm_lab {

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

// GFLOP/s with three significant digits: 0.412, 5.31, 36.2, 171.
std::string gflops_text(double g) {
  return g < 1 ? fixed(g, 3) : g < 10 ? fixed(g, 2) : g < 100 ? fixed(g, 1) : fixed(g, 0);
}

std::string percent_text(double fraction) {
  const double p = 100 * fraction;
  return (p < 10 ? fixed(p, 1) : fixed(p, 0)) + "%";
}

// Every string written into the chart's script (the title, series names, file names) is quoted
// by Freight's one gnuplot quoting helper, so that gnuplot expands nothing in it.
using freight::bench::gnuplot_file;
using freight::bench::gnuplot_string;

}  // namespace

Timing summarize(std::vector<double> seconds) {
  Timing t;
  if (seconds.empty()) return t;
  std::sort(seconds.begin(), seconds.end());
  const size_t n = seconds.size();
  t.median_s = n % 2 ? seconds[n / 2] : 0.5 * (seconds[n / 2 - 1] + seconds[n / 2]);
  t.min_s = seconds.front();
  t.max_s = seconds.back();
  t.reps = int(n);
  return t;
}

Timing time_runs(const std::function<void()>& run, int min_reps, int max_reps, double budget_s) {
  double t0 = now_s();
  run();  // warm-up: caches, page tables, the library's thread pool and buffers
  const double warm = now_s() - t0;
  std::vector<double> seconds;
  if (warm > budget_s) seconds.push_back(warm);  // too slow to spend a run on warming alone
  const double start = now_s();
  while (int(seconds.size()) < max_reps &&
         (int(seconds.size()) < min_reps || now_s() - start < budget_s)) {
    t0 = now_s();
    run();
    seconds.push_back(now_s() - t0);
  }
  return summarize(std::move(seconds));
}

std::string shape_label(const Shape& s) {
  if (is_square(s)) return std::to_string(s.m);
  return std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k);
}

bool is_square(const Shape& s) {
  return s.m == s.n && s.n == s.k;
}

const Series* Results::library_for(const Series& s) const {
  for (const Series& l : series)
    if (l.library && l.threads == s.threads) return &l;
  return nullptr;
}

std::string markdown_table(const Results& r) {
  std::ostringstream out;
  out << "| variant | threads |";
  for (const Shape& s : r.shapes) out << " " << shape_label(s) << " |";
  out << "\n|---|---:|";
  for (size_t i = 0; i < r.shapes.size(); ++i) out << "---:|";
  out << "\n";
  for (const Series& s : r.series) {
    const Series* lib = r.library_for(s);
    out << "| " << s.name << " | " << s.threads << " |";
    for (size_t i = 0; i < r.shapes.size(); ++i) {
      const Cell& c = s.cells[i];
      if (c.gflops < 0) {
        out << " " << (c.note.empty() ? "–" : c.note) << " |";
        continue;
      }
      out << " " << gflops_text(c.gflops);
      if (lib && lib->cells[i].gflops > 0)
        out << " (" << percent_text(c.gflops / lib->cells[i].gflops) << ")";
      out << " |";
    }
    out << "\n";
  }
  return out.str();
}

std::string markdown_peak_table(const Results& r, const std::function<double(int)>& peak) {
  std::ostringstream out;
  out << "| variant | threads | peak GFLOP/s |";
  for (const Shape& s : r.shapes) out << " " << shape_label(s) << " |";
  out << "\n|---|---:|---:|";
  for (size_t i = 0; i < r.shapes.size(); ++i) out << "---:|";
  out << "\n";
  for (const Series& s : r.series) {
    const double p = peak(s.threads);
    out << "| " << s.name << " | " << s.threads << " | " << gflops_text(p) << " |";
    for (const Cell& c : s.cells)
      out << " " << (c.gflops < 0 ? std::string("–") : percent_text(c.gflops / p)) << " |";
    out << "\n";
  }
  return out.str();
}

bool write_plot(const Results& r, const std::string& dir, const std::string& stem,
                const std::string& title, const std::vector<PeakLine>& peaks) {
  // The script names its files relative to `dir` and runs there, so it can be rerun by hand
  // after editing, and no path of this machine ends up in the pictures.
  const std::string dat = stem + ".dat", gp = stem + ".gp";
  std::vector<size_t> square;
  for (size_t i = 0; i < r.shapes.size(); ++i)
    if (is_square(r.shapes[i])) square.push_back(i);
  if (square.empty()) return true;  // nothing to plot against size
  {
    std::ofstream f(dir + "/" + dat);
    f << "# size";
    for (const Series& s : r.series) f << "\t" << s.name;
    f << "\n";
    for (size_t i : square) {
      f << r.shapes[i].m;
      for (const Series& s : r.series)
        f << "\t" << (s.cells[i].gflops > 0 ? fixed(s.cells[i].gflops, 4) : std::string("?"));
      f << "\n";
    }
  }
  std::ostringstream plot;
  plot << "set title " << gnuplot_string(title) << " noenhanced\n"
       << "set xlabel 'n (C = A·B, all three n × n, float32)' offset 0,0.4\n"
       << "set ylabel 'GFLOP/s (2n³ / median time)'\n"
       << "set logscale x 2\nset logscale y 10\nset grid xtics ytics mytics\n"
       << "set format y '%g'\nset xtics (";
  for (size_t q = 0; q < square.size(); ++q) plot << (q ? ", " : "") << r.shapes[square[q]].m;
  const double lo = r.shapes[square.front()].m, hi = r.shapes[square.back()].m;
  plot << ")\nset xrange [" << lo / 1.25 << ":" << hi * 1.25 << "]\n"
       << "set key below maxrows 4 width 2 noenhanced\nset datafile missing '?'\n"
       << "set datafile separator '\\t'\n"
       << "plot ";
  // Colour-blind-safe defaults (Okabe and Ito) for series without a colour of their own.
  const char* palette[] = {"#cc79a7", "#009e73", "#56b4e9", "#e69f00", "#d55e00", "#0072b2"};
  for (size_t q = 0; q < r.series.size(); ++q) {
    const Series& s = r.series[q];
    const std::string color = !s.color.empty() ? s.color : s.library ? "#000000" : palette[q % 6];
    plot << (q ? ", \\\n     " : "") << gnuplot_file(dat) << " using 1:" << q + 2
         << " with linespoints lw 2 pt " << 5 + int(q) % 8 << " ps 1.2 dt "
         << (s.threads > 1 ? 2 : 1) << " lc rgb '" << color << "' title "
         << gnuplot_string(s.name +
                           (s.threads > 1 ? " (" + std::to_string(s.threads) + " threads)" : ""));
  }
  for (size_t q = 0; q < peaks.size(); ++q)
    plot << ", \\\n     " << peaks[q].gflops << " with lines dt 3 lw 1.5 lc rgb '" << peaks[q].color
         << "' title " << gnuplot_string(peaks[q].label);
  plot << "\n";
  {
    std::ofstream f(dir + "/" + gp);
    f << "# GEMM lab chart: gnuplot " << gnuplot_file(gp) << " (run in this directory)\n"
      << "set terminal pngcairo size 1100,800 font ',11'\nset output "
      << gnuplot_file(stem + ".png") << "\n"
      << plot.str() << "set terminal svg size 1100,800 dynamic font ',11'\nset output "
      << gnuplot_file(stem + ".svg") << "\nreplot\n";
  }
  // An argument vector in `dir`, no shell (bench/subprocess.h).
  if (freight::bench::run_command(freight::bench::gnuplot_command(gp), dir, "") != 0) {
    std::fprintf(stderr, "gemm lab: gnuplot failed on %s/%s (is gnuplot installed?)\n", dir.c_str(),
                 gp.c_str());
    return false;
  }
  return true;
}

std::string load_average() {
  std::ifstream f("/proc/loadavg");
  double a = 0, b = 0, c = 0;
  if (!(f >> a >> b >> c)) return "unknown";
  return fixed(a, 2) + ", " + fixed(b, 2) + ", " + fixed(c, 2);
}

}  // namespace gemm_lab
