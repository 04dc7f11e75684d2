// The GEMM lab, CPU side: C = A·B in float32 six ways, from the textbook triple loop to OpenBLAS,
// on square sizes and on a few shapes that deep-learning layers produce. Each variant is checked
// against a float64 reference before it is timed. Writes a Markdown report and a chart.
//
//   build/bench/gemm/freight_gemm_lab --out gemm-lab            # the full ladder (a few minutes)
//   build/bench/gemm/freight_gemm_lab --quick --out /tmp/gl     # small sizes, seconds
//
// What each step changes and why it is faster: docs/gemm-lab.md.
#include <cblas.h>
#include <omp.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "gemm_check.h"
#include "gemm_cpu.h"
#include "machine.h"
#include "report.h"

using namespace gemm_lab;

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

using GemmFn = std::function<void(const float*, const float*, float*, Shape)>;

struct Variant {
  std::string name;
  int threads = 1;
  bool library = false;
  // Every row of C costs the same in this variant (each row reads all of B, nothing is shared
  // between rows), so a large product can be timed on a band of rows: see measure().
  bool row_band = false;
  std::string color;  // on the chart: a step and its all-cores twin share a colour
  GemmFn run;
};

// Parses "64x512x784" (m x n x k).
Shape parse_shape(const std::string& text) {
  Shape s{0, 0, 0};
  long long m = 0, n = 0, k = 0;
  char tail = 0;
  if (std::sscanf(text.c_str(), "%lldx%lldx%lld%c", &m, &n, &k, &tail) != 3 || m <= 0 || n <= 0 ||
      k <= 0)
    throw CLI::ValidationError("--shapes",
                               "expected MxNxK with positive sizes, got '" + text + "'");
  s.m = m, s.n = n, s.k = k;
  return s;
}

struct Measured {
  Cell cell;
  CheckResult check;
  Timing timing;
  int64_t rows = 0;  // rows of C computed per run (all of them unless banded)
};

// Validates, then times one variant on one shape.
Measured measure(const Variant& v, const Shape& s, const std::vector<float>& a,
                 const std::vector<float>& b, const Reference& ref, double budget, int max_reps) {
  Measured out;
  std::vector<float> c(size_t(s.m * s.n), std::nanf(""));  // NaN: an unwritten element shows
  out.rows = s.m;
  if (v.row_band && s.m > 8) {
    // Estimate the full product from 4 rows; if it would take longer than a third of the
    // budget, time a band of rows instead, sized so that a run takes about that long.
    const double t0 = now_s();
    v.run(a.data(), b.data(), c.data(), Shape{4, s.n, s.k});
    const double per_row = (now_s() - t0) / 4;
    if (per_row * double(s.m) > budget / 3)
      out.rows = std::clamp<int64_t>(int64_t(budget / 3 / per_row), 8, s.m);
  }
  const Shape band{out.rows, s.n, s.k};
  auto run = [&] { v.run(a.data(), b.data(), c.data(), band); };
  run();  // the validation run
  out.check = ref.check(c.data(), error_bound(s.k), out.rows);
  if (!out.check.ok()) {
    out.cell.note = "WRONG";
    return out;
  }
  out.timing = time_runs(run, 3, max_reps, budget);
  out.cell.gflops = band.flops() / out.timing.median_s * 1e-9;
  if (out.rows < s.m) out.cell.note = "band";
  return out;
}

std::string compiler_text() {
#if defined(__clang__)
  return std::string("Clang ") + __clang_version__;
#elif defined(__GNUC__)
  return std::string("GCC ") + __VERSION__;
#else
  return "unknown compiler";
#endif
}

}  // namespace

int main(int argc, char** argv) {
  std::string out_dir = "gemm-lab";
  std::vector<int64_t> sizes = {128, 256, 512, 1024, 2048};
  std::vector<std::string> shape_texts = {"64x512x784", "784x512x64", "64x576x288"};
  std::vector<int> only;
  double budget = 1.5;
  int max_reps = 31;
  int threads = omp_get_num_procs();
  bool quick = false, plot = true;
  CLI::App app{"GEMM lab (CPU): six ways to multiply matrices, validated, timed and explained"};
  app.add_option("--out", out_dir, "directory for gemm-cpu.md, .png, .svg (and .dat, .gp)");
  app.add_option("--sizes", sizes, "square sizes n (C = A·B, all n x n)")->delimiter(',');
  app.add_option("--shapes", shape_texts, "other shapes, MxNxK (C is MxN, the sum runs over K)")
      ->delimiter(',');
  app.add_option("--variants", only, "run only these steps (1-6), e.g. 3,4,6")->delimiter(',');
  app.add_option("--budget", budget, "seconds of timed runs per measurement (at least 3 runs)");
  app.add_option("--max-reps", max_reps, "at most this many timed runs per measurement");
  app.add_option("--threads", threads, "cores for the parallel rows (5) and (6)");
  app.add_flag("--quick", quick, "small sizes and a short budget: a smoke run of a few seconds");
  app.add_flag("!--no-plot", plot, "skip gnuplot");
  CLI11_PARSE(app, argc, argv);
  if (quick) {
    if (app.count("--sizes") == 0) sizes = {64, 128, 256};
    if (app.count("--shapes") == 0) shape_texts = {"64x512x784"};
    if (app.count("--budget") == 0) budget = 0.1;
  }
  threads = std::max(1, threads);

  std::vector<Shape> shapes;
  for (int64_t n : sizes) shapes.push_back(Shape{n, n, n});
  try {
    for (const std::string& t : shape_texts) shapes.push_back(parse_shape(t));
  } catch (const CLI::Error& e) {
    return app.exit(e);
  }

  std::printf("GEMM lab (CPU): probing the machine...\n");
  const Machine machine = probe_machine(true);
  const TiledBlocking tiled = tiled_blocking(machine.caches);
  const PackedBlocking packed = packed_blocking(machine.caches);
  std::printf("%s (%s), %d cores, %s\n%s\n", machine.cpu_model.c_str(),
              machine.cpu_signature.c_str(), machine.cores, machine.isa.c_str(),
              machine.cache_text.c_str());
  for (const std::string& line : machine.explain_peak()) std::printf("  %s\n", line.c_str());
  for (const std::string& line : explain_blocking(machine.caches))
    std::printf("  %s\n", line.c_str());

  // The ceiling of step (4): its micro-kernel alone, operands in L1 (best of many short runs,
  // as for the FMA loop: a run that was preempted is only slower).
  double kernel_l1_gflops = 0;
  {
    const int64_t calls = std::max<int64_t>(1, int64_t(2e6 / double(packed.mr * packed.kc)));
    const double flops = 2.0 * double(packed.mr * packed.nr * packed.kc) * double(calls);
    float sink = 0;
    for (int r = 0; r < 200; ++r) {
      const double t0 = now_s();
      sink += micro_kernel_in_l1(packed, calls);
      kernel_l1_gflops = std::max(kernel_l1_gflops, flops / (now_s() - t0) * 1e-9);
    }
    if (sink == 12345.0f) std::printf(" ");  // keeps the runs from being optimised away
  }
  char kernel_text[300];
  std::snprintf(kernel_text, sizeof kernel_text,
                "the %lldx%lld micro-kernel of step (4) alone, its operands in L1, reaches %.1f "
                "GFLOP/s (%.0f%% of one core's peak): the ceiling of steps (4) and (5) per core",
                (long long)packed.mr, (long long)packed.nr, kernel_l1_gflops,
                100 * kernel_l1_gflops / machine.peak_gflops(1));
  std::printf("  %s\n", kernel_text);

  const std::string reg_tile = std::to_string(packed.mr) + "x" + std::to_string(packed.nr);
  std::vector<Variant> variants = {
      {"(1) naive i-j-k", 1, false, true, "#cc79a7",
       [](const float* a, const float* b, float* c, Shape s) { gemm_naive(a, b, c, s); }},
      {"(2) loop order i-k-j", 1, false, true, "#009e73",
       [](const float* a, const float* b, float* c, Shape s) { gemm_reordered(a, b, c, s); }},
      {"(3) cache-tiled", 1, false, false, "#56b4e9",
       [&](const float* a, const float* b, float* c, Shape s) { gemm_tiled(a, b, c, s, tiled); }},
      {"(4) packed + " + reg_tile + " register tile", 1, false, false, "#e69f00",
       [&](const float* a, const float* b, float* c, Shape s) { gemm_packed(a, b, c, s, packed); }},
      {"(5) packed, all cores", threads, false, false, "#e69f00",
       [&](const float* a, const float* b, float* c, Shape s) {
         gemm_packed_parallel(a, b, c, s, packed, threads);
       }},
      {"(6) OpenBLAS sgemm", 1, true, false, "#000000",
       [](const float* a, const float* b, float* c, Shape s) { gemm_openblas(a, b, c, s, 1); }},
      {"(6) OpenBLAS sgemm, all cores", threads, true, false, "#000000",
       [&](const float* a, const float* b, float* c, Shape s) {
         gemm_openblas(a, b, c, s, threads);
       }},
  };
  const int steps[] = {1, 2, 3, 4, 5, 6, 6};
  std::vector<Variant> chosen;
  for (size_t i = 0; i < variants.size(); ++i) {
    if (!only.empty() && std::find(only.begin(), only.end(), steps[i]) == only.end()) continue;
    const bool all_cores = i == 4 || i == 6;
    if (threads == 1 && all_cores) continue;  // it would repeat the 1-thread row
    chosen.push_back(variants[i]);
  }

  Results results;
  results.shapes = shapes;
  for (const Variant& v : chosen)
    results.series.push_back(
        {v.name, v.threads, v.library, std::vector<Cell>(shapes.size()), v.color});
  std::vector<std::string> validation(chosen.size());
  std::vector<double> worst_ratio(chosen.size(), 0.0);
  bool any_wrong = false, any_band = false;

  for (size_t si = 0; si < shapes.size(); ++si) {
    const Shape& s = shapes[si];
    std::vector<float> a(size_t(s.m * s.k)), b(size_t(s.k * s.n));
    fill_uniform(a, 1000 + si);
    fill_uniform(b, 2000 + si);
    const Reference ref(a.data(), b.data(), s);
    std::printf("\n%s (m %lld, n %lld, k %lld): %.3g GFLOP per product, reference checks %s\n",
                shape_label(s).c_str(), (long long)s.m, (long long)s.n, (long long)s.k,
                s.flops() * 1e-9, ref.coverage().c_str());
    for (size_t vi = 0; vi < chosen.size(); ++vi) {
      const Measured r = measure(chosen[vi], s, a, b, ref, budget, max_reps);
      results.series[vi].cells[si] = r.cell;
      if (r.cell.gflops < 0) {
        any_wrong = true;
        std::printf("  %-36s WRONG: %s\n", chosen[vi].name.c_str(), r.check.describe().c_str());
        continue;
      }
      any_band |= r.rows < s.m;
      const double ratio = r.check.max_error / r.check.bound;
      if (ratio >= worst_ratio[vi]) {
        worst_ratio[vi] = ratio;
        char buf[160];
        std::snprintf(buf, sizeof buf, "%.1e (bound %.1e at k = %lld)", r.check.max_error,
                      r.check.bound, (long long)s.k);
        validation[vi] = buf;
      }
      std::printf("  %-36s %8.2f GFLOP/s  median of %2d runs, %9.3f ms%s; %s\n",
                  chosen[vi].name.c_str(), r.cell.gflops, r.timing.reps, r.timing.median_s * 1e3,
                  r.rows < s.m ? (" (band of " + std::to_string(r.rows) + " rows)").c_str() : "",
                  r.check.describe().c_str());
      std::fflush(stdout);
    }
  }

  // ---- the report
  std::filesystem::create_directories(out_dir);
  const std::string load = load_average();
  std::ostringstream md;
  md << "# GEMM lab: CPU results\n\n"
     << "C = A·B in float32, six ways (bench/gemm, explained in docs/gemm-lab.md). Produced by "
        "`freight_gemm_lab`.\n\n"
     << "## Machine\n\n"
     << "- CPU: " << machine.cpu_model
     << (machine.cpu_signature.empty() ? "" : " (" + machine.cpu_signature + ")") << ", "
     << machine.cores << " cores, " << machine.isa << "\n"
     << "- caches: " << machine.cache_text << "\n";
  for (const std::string& line : machine.explain_peak()) md << "- " << line << "\n";
  md << "- " << kernel_text << "\n";
  md << "- software: " << compiler_text() << ", " << GEMM_LAB_FLAGS << "; " << openblas_get_config()
     << " (kernel " << openblas_get_corename() << ")\n"
     << "- load average during the run (1, 5, 15 min): " << load << "\n\n"
     << "## Tile sizes, from the cache sizes read at run time\n\n";
  for (const std::string& line : explain_blocking(machine.caches)) md << "- " << line << "\n";
  md << "\n## GFLOP/s\n\n"
     << "Median of at least 3 timed runs after a warm-up (and within about " << budget
     << " s per cell). In parentheses: the fraction of OpenBLAS with the same number of threads. "
        "Square sizes n multiply two n x n matrices; MxNxK means C is M x N and the sum runs "
        "over K: 64x512x784 is a fully connected layer 784 -> 512 on a batch of 64, 784x512x64 "
        "the gradient of its weights, 64x576x288 a 3x3 convolution 32 -> 64 channels on a "
        "26 x 26 image as one matrix product (im2col).\n\n"
     << markdown_table(results) << "\n";
  if (any_band)
    md << "\"band\": the row-independent loops (1) and (2) were timed on a band of rows of C "
          "where the whole product would take too long; every row of C does the same work "
          "(it reads all of B), so the rate of a band is the rate of the whole.\n\n";
  md << "## Fraction of the theoretical peak\n\n"
     << markdown_peak_table(results, [&](int t) { return machine.peak_gflops(t); }) << "\n"
     << "## Validation\n\n"
     << "Each variant's result was compared with a float64 reference before it was timed. "
        "Error: max over C of |c - ref| / sum_p |a_ip b_pj|, which for any correct float32 "
        "GEMM is at most about k · 2^-24 (bound shown). Largest error seen per variant:\n\n";
  for (size_t vi = 0; vi < chosen.size(); ++vi)
    md << "- " << chosen[vi].name
       << (chosen[vi].threads > 1 ? " (" + std::to_string(chosen[vi].threads) + " threads)" : "")
       << ": " << (validation[vi].empty() ? "not validated" : validation[vi]) << "\n";
  md << "\n![GFLOP/s against n](gemm-cpu.png)\n";
  {
    std::ofstream f(out_dir + "/gemm-cpu.md");
    f << md.str();
  }
  std::printf("\n%s", md.str().c_str());
  if (plot) {
    std::vector<PeakLine> peaks = {{"peak, 1 core", machine.peak_gflops(1), "#a0a0a0"},
                                   {"(4) micro-kernel alone, in L1", kernel_l1_gflops, "#e69f00"}};
    if (threads > 1)
      peaks.push_back(
          {"peak, " + std::to_string(threads) + " cores", machine.peak_gflops(threads), "#505050"});
    write_plot(
        results, out_dir, "gemm-cpu",
        "GEMM lab, CPU: " + machine.cpu_model + ", " + std::to_string(machine.cores) + " cores",
        peaks);
  }
  std::printf("\nwrote %s/gemm-cpu.md%s\n", out_dir.c_str(), plot ? ", .png, .svg" : "");
  return any_wrong ? 1 : 0;
}
