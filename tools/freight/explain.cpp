// freight explain: where a training step's time goes, per layer and per phase, against the
// roofline of the device's measured peaks; with --device2, two devices side by side and which
// layers gain most from the move. Writes a roofline plot (gnuplot: PNG and SVG).
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "bench/gnuplot.h"
#include "bench/subprocess.h"
#include "commands.h"
#include "flags.h"
#include "freight/error.h"
#include "freight/explain.h"
#include "freight/runtime.h"

namespace freight::cli {

namespace {

namespace fs = std::filesystem;
using bench::gnuplot_data_label;
using bench::gnuplot_file;
using bench::gnuplot_string;

std::string ms(double s) {
  return fmt::format("{:.3f}", s * 1e3);
}
std::string gf(double f) {
  return f > 0 ? fmt::format("{:.1f}", f / 1e9) : "-";
}
std::string pct(double x) {
  return fmt::format("{:.1f}%", 100 * x);
}
std::string cut(const std::string& s, size_t w) {
  return s.size() > w ? s.substr(0, w - 1) + "~" : s;
}
std::string rate_text(double bytes_per_s) {
  return fmt::format("{:.1f} GB/s", bytes_per_s / 1e9);
}
std::string flops_rate(double f) {
  return f >= 1e12 ? fmt::format("{:.1f} TFLOP/s", f / 1e12)
                   : fmt::format("{:.1f} GFLOP/s", f / 1e9);
}

void print_header(const ExplainResult& r) {
  const DevicePeaks& p = r.peaks;
  fmt::print("explain {} on {} ({}{}), batch {}, {}; synthetic data\n", r.model, r.device.str(),
             p.name, r.device.is_cpu() ? fmt::format(", {} threads", p.threads) : std::string(),
             r.batch_size, r.optimizer);
  fmt::print("peaks ({} {}): fp32 GEMM {}, memory {}, ridge {:.1f} FLOP/byte, op {:.2f} µs\n",
             p.from_cache ? "cached, measured" : "measured", p.measured_at,
             flops_rate(p.fp32_flops), rate_text(p.mem_bandwidth), p.ridge(), p.op_s * 1e6);
  fmt::print(
      "step {} ms profiled, {} ms unprofiled (profiling adds {:.0f}%); {} steps profiled, "
      "the faster {} kept\n\n",
      ms(r.step_s), ms(r.unprofiled_step_s),
      r.unprofiled_step_s > 0 ? 100 * (r.step_s / r.unprofiled_step_s - 1) : 0.0, r.steps_measured,
      r.steps_kept);
  const CacheSharing& a = r.cache_sharing_start;
  const CacheSharing& b = r.cache_sharing_end;
  if (a.measured && b.measured && !(a.shared() && b.shared()))
    fmt::print(
        "note: the threads did not share a cache at the start or the end of profiling (a thread "
        "read the other's data at {:.2f}x, then {:.2f}x its own rate; apart below {}x): the "
        "step's split work crossed between caches and ran slower than it can (freight devices "
        "tells whether they do now)\n\n",
        a.ratio(), b.ratio(), kSharedCacheRatio);
}

void print_table(const ExplainResult& r, int top) {
  const DevicePeaks& p = r.peaks;
  std::vector<const ExplainRow*> rows;
  for (const ExplainRow& row : r.rows) rows.push_back(&row);
  // --top N: the N most expensive layers in forward order, the rest summed on one line.
  std::vector<const ExplainRow*> layers;
  for (const ExplainRow* row : rows)
    if (row->kind == "layer") layers.push_back(row);
  double hidden_s = 0;
  size_t hidden = 0;
  if (top > 0 && int(layers.size()) > top) {
    std::vector<const ExplainRow*> by_time = layers;
    std::sort(by_time.begin(), by_time.end(),
              [](auto* a, auto* b) { return a->time() > b->time(); });
    by_time.resize(size_t(top));
    std::vector<const ExplainRow*> kept;
    for (const ExplainRow* row : rows) {
      if (row->kind != "layer" || std::find(by_time.begin(), by_time.end(), row) != by_time.end())
        kept.push_back(row);
      else
        hidden_s += row->time(), ++hidden;
    }
    rows = kept;
  }
  size_t wn = 5, wd = 5;
  for (const ExplainRow* row : rows) {
    wn = std::max(wn, row->name.size());
    wd = std::max(wd, std::min<size_t>(row->describe.size(), 40));
  }
  fmt::print("{:<{}}  {:<{}} {:>8} {:>8} {:>8} {:>6} {:>8} {:>8} {:>7} {:>8} {:>8} {:>6}  {}\n",
             "layer", wn, "what", wd, "fwd ms", "bwd ms", "total", "share", "MFLOP", "MB", "FLOP/B",
             "GFLOP/s", "roof", "%roof", "bound");
  bool hidden_shown = false;
  for (const ExplainRow* row : rows) {
    if (hidden && !hidden_shown && row->kind != "layer" && row->kind != "loss") {
      fmt::print("{:<{}}  {:<{}} {:>8} {:>8} {:>8} {:>6}\n", "...", wn,
                 fmt::format("{} more layers", hidden), wd, "", "", ms(hidden_s),
                 pct(hidden_s / r.step_s));
      hidden_shown = true;
    }
    bool has_cost = row->flops > 0 || row->bytes > 0;
    std::string what = cut(row->describe, wd);
    if (row->kind != "layer" && row->kind != "loss" && row->kind != "optimizer") {
      fmt::print("{:<{}}  {:<{}} {:>8} {:>8} {:>8} {:>6}\n", row->name, wn, what, wd, "", "",
                 ms(row->time()), pct(row->time() / r.step_s));
      continue;
    }
    double roof = roofline_rate(*row, p);
    fmt::print(
        "{:<{}}  {:<{}} {:>8} {:>8} {:>8} {:>6} {:>8} {:>8} {:>7} {:>8} {:>8} {:>6}  {}\n",
        row->name, wn, what, wd, row->kind == "optimizer" ? "" : ms(row->fwd_s),
        row->kind == "optimizer" ? "" : ms(row->bwd_s), ms(row->time()),
        pct(row->time() / r.step_s), has_cost ? fmt::format("{:.2f}", row->flops / 1e6) : "-",
        has_cost ? fmt::format("{:.2f}", row->bytes / 1e6) : "-",
        row->bytes > 0 ? fmt::format("{:.2f}", row->intensity()) : "-", gf(row->rate()),
        has_cost ? gf(roof) : "-",
        row->flops > 0 && row->time() > 0 ? fmt::format("{:.0f}%", 100 * row->rate() / roof) : "-",
        bound_by(*row, p));
  }
  if (const std::string note = beyond_roof_note(r); !note.empty()) fmt::print("\n{}\n", note);
  double layers_s = 0;
  for (const ExplainRow& row : r.rows)
    if (row.kind == "layer" || row.kind == "loss") layers_s += row.time();
  fmt::print("\nattributed {} of the step ({} ms of {} ms; other {})\n", pct(r.attributed),
             ms(r.step_s - r.other_s), ms(r.step_s), pct(r.other_s / r.step_s));
  fmt::print(
      "phases: forward {} ms ({}), backward {} ms ({}; of which autograd engine {} ms), "
      "optimizer {} ms ({}), host-to-device {} ms, sync {} ms\n",
      ms(r.forward_s), pct(r.forward_s / r.step_s), ms(r.backward_s), pct(r.backward_s / r.step_s),
      ms(r.engine_s), ms(r.optimizer_s), pct(r.optimizer_s / r.step_s), ms(r.copy_s), ms(r.sync_s));
  fmt::print(
      "dispatch/launch overhead (estimated: kernel calls x {:.2f} µs per op): {} ms ({} "
      "of the step, included in the layers' times)\n",
      p.op_s * 1e6, ms(r.overhead_est_s), pct(r.overhead_est_s / r.step_s));
  (void)layers_s;
  if (r.data) {
    const DataCost& d = *r.data;
    const double step = r.unprofiled_step_s > 0 ? r.unprofiled_step_s : r.step_s;
    fmt::print(
        "data {}: {} training samples read in {:.2f} s (once per run); the loader prepares a "
        "batch in {} ms on its own thread ({} batches timed), {} the {} ms step\n",
        d.data, d.samples, d.load_s, ms(d.batch_s), d.batches_timed,
        d.batch_s <= step ? "hidden behind" : "LONGER than, so the step waits for it:", ms(step));
    for (const std::string& note : d.notes) fmt::print("  {}\n", note);
  }
}

// ---- side by side ----
std::string why(const ExplainRow& a, const ExplainRow& b, const DevicePeaks& pa,
                const DevicePeaks& pb) {
  std::string ba = bound_by(a, pa), bb = bound_by(b, pb);
  if (bb == "overhead")
    return fmt::format("tiny: {:.0f} kernel calls x {:.1f} µs on {} outweigh its arithmetic", b.ops,
                       pb.op_s * 1e6, pb.device.str());
  if (bb == "compute")
    return fmt::format("compute-bound: expect about the peak ratio, {:.1f}x",
                       pb.fp32_flops / pa.fp32_flops);
  if (bb == "memory")
    return fmt::format("memory-bound ({:.1f} FLOP/B): expect about the bandwidth ratio, {:.1f}x",
                       b.intensity(), pb.mem_bandwidth / pa.mem_bandwidth);
  (void)ba;
  return "-";
}

void print_side_by_side(const ExplainResult& a, const ExplainResult& b) {
  std::string da = a.device.str(), db = b.device.str();
  if (da == db) da += "#1", db += "#2";
  fmt::print("\n{} vs {}: step {} ms vs {} ms profiled ({} vs {} unprofiled): {:.2f}x\n", da, db,
             ms(a.step_s), ms(b.step_s), ms(a.unprofiled_step_s), ms(b.unprofiled_step_s),
             a.unprofiled_step_s / b.unprofiled_step_s);
  fmt::print("peak ratio {:.2f}x, bandwidth ratio {:.2f}x, per-op cost ratio {:.2f}x\n\n",
             b.peaks.fp32_flops / a.peaks.fp32_flops, b.peaks.mem_bandwidth / a.peaks.mem_bandwidth,
             a.peaks.op_s / b.peaks.op_s);
  struct Pair {
    const ExplainRow *a, *b;
  };
  std::vector<Pair> pairs;
  for (const ExplainRow& ra : a.rows)
    for (const ExplainRow& rb : b.rows)
      if (ra.name == rb.name && ra.kind == rb.kind && ra.kind != "other") {
        if (ra.time() > 0 || rb.time() > 0) pairs.push_back({&ra, &rb});
        break;
      }
  // Which layers gain most: the largest time saved first.
  std::sort(pairs.begin(), pairs.end(), [](const Pair& x, const Pair& y) {
    return x.a->time() - x.b->time() > y.a->time() - y.b->time();
  });
  size_t wn = 5, wd = 5;
  for (const Pair& p : pairs) {
    wn = std::max(wn, p.a->name.size());
    wd = std::max(wd, std::min<size_t>(p.a->describe.size(), 30));
  }
  fmt::print("{:<{}}  {:<{}} {:>9} {:>9} {:>8} {:>9} {:>9}  {}\n", "layer", wn, "what", wd,
             da + " ms", db + " ms", "speedup", "saved ms", "bound", "why");
  for (const Pair& p : pairs) {
    double ta = p.a->time(), tb = p.b->time();
    bool costed = p.a->flops > 0 || p.a->bytes > 0;
    fmt::print(
        "{:<{}}  {:<{}} {:>9} {:>9} {:>8} {:>9} {:>9}  {}\n", p.a->name, wn, cut(p.a->describe, wd),
        wd, ms(ta), ms(tb), tb > 0 ? fmt::format("{:.2f}x", ta / tb) : "-", ms(ta - tb),
        costed ? bound_by(*p.b, b.peaks) : "-", costed ? why(*p.a, *p.b, a.peaks, b.peaks) : "");
  }
}

// ---- the roofline plot ----
struct PlotSet {
  const ExplainResult* r;
  std::string label;
};

// Writes <prefix>.dat, <prefix>.gp and, when gnuplot runs, <prefix>.png and <prefix>.svg.
// Returns the images written ("" when gnuplot is missing or failed, with the reason in `note`).
std::vector<std::string> write_plot(const std::string& prefix, const std::vector<PlotSet>& sets,
                                    std::string& note) {
  fs::path base(prefix);
  if (base.has_parent_path()) {
    std::error_code ec;
    fs::create_directories(base.parent_path(), ec);
    FREIGHT_CHECK(!ec, fmt::format("--plot {}: cannot create the directory '{}': {}", prefix,
                                   base.parent_path().string(), ec.message()));
  }
  double xmin = 1e30, xmax = 0, ymin = 1e30, ymax = 0;
  std::vector<std::string> dats;
  for (size_t s = 0; s < sets.size(); ++s) {
    std::string dat = prefix + (sets.size() > 1 ? fmt::format(".{}", s + 1) : "") + ".dat";
    std::ofstream f(dat);
    FREIGHT_CHECK(f.good(),
                  fmt::format("--plot: cannot write '{}': {}", dat, std::strerror(errno)));
    f << "# intensity_flop_per_byte achieved_gflops share label\n";
    const ExplainResult& r = *sets[s].r;
    for (const ExplainRow& row : r.rows) {
      if (row.flops <= 0 || row.bytes <= 0 || row.time() <= 0) continue;
      double share = row.time() / r.step_s;
      f << fmt::format("{:.6g} {:.6g} {:.4f} {}\n", row.intensity(), row.rate() / 1e9, share,
                       gnuplot_data_label(share >= 0.03 ? row.name : ""));
      xmin = std::min(xmin, row.intensity());
      xmax = std::max(xmax, row.intensity());
      ymin = std::min(ymin, row.rate() / 1e9);
    }
    xmax = std::max(xmax, r.peaks.ridge());
    ymax = std::max(ymax, r.peaks.fp32_flops / 1e9);
    dats.push_back(dat);
  }
  if (xmax == 0) {
    note = "no layer with FLOPs to plot";
    return {};
  }
  xmin = std::pow(10, std::floor(std::log10(xmin / 2)));
  xmax = std::pow(10, std::ceil(std::log10(xmax * 2)));
  ymin = std::pow(10, std::floor(std::log10(std::max(ymin / 2, 1e-6))));
  ymax = std::pow(10, std::ceil(std::log10(ymax * 1.5)));

  std::string gp = prefix + ".gp";
  std::ofstream g(gp);
  FREIGHT_CHECK(g.good(), fmt::format("--plot: cannot write '{}': {}", gp, std::strerror(errno)));
  const ExplainResult& r0 = *sets[0].r;
  // Every user-given string (the model's name, the --plot prefix, labels) goes in through
  // bench/gnuplot.h, even in comments: a newline in it would end the comment and start a command.
  g << "# Roofline of " << gnuplot_string(r0.model)
    << ": each layer at (FLOPs/byte, achieved GFLOP/s)\n"
    << "# under min(peak, intensity x bandwidth) from the measured peaks. Regenerate: gnuplot "
    << gnuplot_file(gp) << "\n";
  g << "set logscale xy\nset grid\nset key top left\n";
  g << fmt::format("set xrange [{:g}:{:g}]\nset yrange [{:g}:{:g}]\n", xmin, xmax, ymin, ymax);
  g << "set xlabel 'arithmetic intensity (FLOP/byte)'\nset ylabel 'GFLOP/s'\n";
  g << "set title "
    << gnuplot_string(fmt::format("{}: roofline, batch {}", r0.model, r0.batch_size)) << "\n";
  const char* colors[] = {"#1f77b4", "#d62728", "#2ca02c"};
  std::string plots;
  for (size_t s = 0; s < sets.size(); ++s) {
    const DevicePeaks& p = sets[s].r->peaks;
    g << fmt::format(
        "peak{0} = {1:.6g}\nbw{0} = {2:.6g}\nroof{0}(x) = x * bw{0} < peak{0} ? x * "
        "bw{0} : peak{0}\n",
        s, p.fp32_flops / 1e9, p.mem_bandwidth / 1e9);
    if (!plots.empty()) plots += ", \\\n     ";
    plots += fmt::format(
        "roof{0}(x) with lines lw 2 lc rgb '{1}' title {2}, \\\n     {3} using 1:2:(1+20*$3) "
        "with points pt 7 ps variable lc rgb '{1}' title {4}, \\\n     {3} using 1:2:4 with "
        "labels offset 1,0.6 font ',8' tc rgb '{1}' notitle",
        s, colors[s % 3],
        gnuplot_string(fmt::format("{} roof: {:.0f} GFLOP/s, {:.1f} GB/s", sets[s].label,
                                   p.fp32_flops / 1e9, p.mem_bandwidth / 1e9)),
        gnuplot_file(dats[s]), gnuplot_string(sets[s].label + " layers (size: share of step)"));
  }
  std::string png = prefix + ".png", svg = prefix + ".svg";
  g << "set terminal pngcairo size 1000,700\nset output " << gnuplot_file(png) << "\nplot " << plots
    << "\n";
  g << "set terminal svg size 1000,700 dynamic\nset output " << gnuplot_file(svg) << "\nreplot\n";
  g << "unset output\n";
  g.close();
  // An argument vector, no shell: the prefix is a file name, whatever characters it holds.
  int rc = bench::run_command(bench::gnuplot_command(gp), "", "");
  if (rc != 0) {
    note = fmt::format("gnuplot failed or is not installed (exit status {}); the script is {}", rc,
                       gp);
    return {};
  }
  return {png, svg};
}

nlohmann::json to_json(const ExplainResult& r) {
  nlohmann::json rows = nlohmann::json::array();
  for (const ExplainRow& row : r.rows)
    rows.push_back({{"name", row.name},
                    {"what", row.describe},
                    {"kind", row.kind},
                    {"fwd_s", row.fwd_s},
                    {"bwd_s", row.bwd_s},
                    {"time_s", row.time()},
                    {"share", row.time() / r.step_s},
                    {"flops", row.flops},
                    {"bytes", row.bytes},
                    {"intensity", row.intensity()},
                    {"achieved_flops", row.rate()},
                    {"roof_flops", roofline_rate(row, r.peaks)},
                    {"bound", bound_by(row, r.peaks)},
                    {"ops", row.ops},
                    {"nodes", row.nodes}});
  nlohmann::json j = {{"model", r.model},
                      {"device", r.device.str()},
                      {"device_name", r.peaks.name},
                      {"build", r.peaks.build},
                      {"cache_sharing_start", r.cache_sharing_start.measured
                                                  ? nlohmann::json(r.cache_sharing_start.ratio())
                                                  : nlohmann::json()},
                      {"cache_sharing_end", r.cache_sharing_end.measured
                                                ? nlohmann::json(r.cache_sharing_end.ratio())
                                                : nlohmann::json()},
                      {"batch_size", r.batch_size},
                      {"optimizer", r.optimizer},
                      {"step_s", r.step_s},
                      {"unprofiled_step_s", r.unprofiled_step_s},
                      {"attributed", r.attributed},
                      {"steps_measured", r.steps_measured},
                      {"steps_kept", r.steps_kept},
                      {"phases",
                       {{"forward_s", r.forward_s},
                        {"backward_s", r.backward_s},
                        {"engine_s", r.engine_s},
                        {"optimizer_s", r.optimizer_s},
                        {"copy_s", r.copy_s},
                        {"sync_s", r.sync_s},
                        {"other_s", r.other_s},
                        {"overhead_est_s", r.overhead_est_s}}},
                      {"peaks",
                       {{"fp32_flops", r.peaks.fp32_flops},
                        {"mem_bandwidth", r.peaks.mem_bandwidth},
                        {"op_s", r.peaks.op_s},
                        {"measured_at", r.peaks.measured_at}}},
                      {"rows", rows}};
  if (r.data)
    j["data"] = {{"data", r.data->data},
                 {"samples", r.data->samples},
                 {"load_s", r.data->load_s},
                 {"batch_s", r.data->batch_s},
                 {"batches_timed", r.data->batches_timed},
                 {"notes", r.data->notes}};
  return j;
}

}  // namespace

void add_explain(CLI::App& app) {
  struct Opts {
    ExplainOptions e;
    std::string device2;
    int threads2 = 0;
    std::string plot;
    bool no_plot = false;
    std::string json;
    int top = 0;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "explain",
      "Where a training step's time goes: per layer and phase, time, FLOPs, bytes, arithmetic "
      "intensity and the roofline bound from the measured peaks");
  cmd->add_option("--model,-m", o->e.model, "Zoo model name or model file")->capture_default_str();
  cmd->add_option("--device,-d", o->e.device, "cpu, cuda, cuda:N or auto")->capture_default_str();
  cmd->add_option_function<int64_t>(
         "--batch-size,-b", [o](const int64_t& v) { o->e.batch_size = v; },
         "Batch size (default: the model's)")
      ->check(in_range(limits::batch_size));
  cmd->add_option("--device2", o->device2,
                  "A second device to run the same step on and compare side by side");
  cmd->add_option("--threads", o->e.threads, "CPU threads for --device (0: all)")
      ->check(in_range(limits::threads));
  cmd->add_option("--threads2", o->threads2, "CPU threads for --device2 (0: all)")
      ->check(in_range(limits::threads));
  // explain() stops at max_steps whatever --steps says: more is refused rather than cut short.
  cmd->add_option("--steps", o->e.min_steps, "Profiled steps (at least; more until 1 s)")
      ->capture_default_str()
      ->check(in_range(IntRange{1, ExplainOptions{}.max_steps}));
  // Warm-up only fills caches and the allocator: a few steps do; 10,000 is a generous cap that
  // still keeps a typo (an extra zero or three) from running for hours.
  cmd->add_option("--warmup", o->e.warmup, "Unprofiled warm-up steps")
      ->capture_default_str()
      ->check(in_range(IntRange{0, 10'000}));
  cmd->add_option("--plot", o->plot,
                  "Path prefix of the roofline plot (PREFIX.png, .svg, .gp, .dat); default "
                  "explain-<model>-<device>");
  cmd->add_flag("--no-plot", o->no_plot, "Skip the roofline plot");
  cmd->add_option("--json", o->json, "Also write the breakdown as JSON to this file");
  cmd->add_option("--data", o->e.data,
                  "Also measure a dataset's cost (as train's --data): its load and the loader's "
                  "time per batch, beside the step (the steps run on synthetic data)");
  cmd->add_option("--top", o->top, "Show only the N most expensive layers (0: all)")
      ->check(in_range(IntRange{0, std::numeric_limits<int>::max()}));
  cmd->callback([o] {
    // Both devices are checked before anything runs: a missing GPU is an error up front, not
    // after the first device's breakdown.
    resolve_device(o->e.device);
    if (!o->device2.empty()) resolve_device(o->device2);
    FREIGHT_CHECK(o->no_plot || bench::gnuplot_can_name(o->plot),
                  fmt::format("--plot: the prefix '{}' holds a control character (a newline, a "
                              "tab, ...), which a gnuplot script cannot name; choose another",
                              o->plot));
    ExplainOptions e1 = o->e;
    ExplainResult a = explain(e1);
    print_header(a);
    print_table(a, o->top);
    std::vector<PlotSet> sets{{&a, a.device.str()}};
    ExplainResult b;
    bool two = !o->device2.empty();
    if (two) {
      ExplainOptions e2 = o->e;
      e2.device = o->device2;
      e2.threads = o->threads2 > 0 ? o->threads2 : 0;
      if (e2.threads == 0 && e1.threads > 0) {
        // explain() sets the thread count only when asked; the second run must not inherit the
        // first one's explicit setting silently.
        e2.threads = int(list_devices().front().compute_units);
      }
      b = explain(e2);
      fmt::print("\n");
      print_header(b);
      print_table(b, o->top);
      print_side_by_side(a, b);
      std::string la = a.device.str(), lb = b.device.str();
      if (la == lb) {
        la += fmt::format(" ({} threads)", a.peaks.threads);
        lb += fmt::format(" ({} threads)", b.peaks.threads);
      }
      sets = {{&a, la}, {&b, lb}};
    }
    if (!o->json.empty()) {
      nlohmann::json j = two ? nlohmann::json{{"runs", {to_json(a), to_json(b)}}} : to_json(a);
      std::ofstream f(o->json);
      FREIGHT_CHECK(f.good(),
                    fmt::format("--json: cannot write '{}': {}", o->json, std::strerror(errno)));
      f << j.dump(2) << "\n";
    }
    if (!o->no_plot) {
      std::string prefix = o->plot.empty()
                               ? fmt::format("explain-{}-{}{}", a.model, a.device.str(),
                                             two ? "-vs-" + b.device.str() : std::string())
                               : o->plot;
      // The default comes from the model's name, which a model file sets to anything: it is
      // made a plain file name in the current directory (':' of "cuda:0" included).
      if (o->plot.empty())
        for (char& c : prefix)
          if (c == ':' || c == '/' || static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '_';
      std::string note;
      std::vector<std::string> files = write_plot(prefix, sets, note);
      if (files.empty())
        fmt::print("\nroofline plot: not drawn: {}\n", note);
      else
        fmt::print(
            "\nroofline plot: {} and {} (each layer at its intensity and achieved rate "
            "under the roof min(peak, intensity x bandwidth))\n",
            files[0], files[1]);
    }
  });
}

}  // namespace freight::cli
