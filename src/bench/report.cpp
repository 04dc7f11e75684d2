// Markdown and gnuplot output of `freight bench`, read from its JSON document.
#include "bench/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>

#include "bench/cache_reruns.h"
#include "bench/gnuplot.h"
#include "bench/subprocess.h"
#include "freight/error.h"
#include "freight/peaks.h"

namespace freight::bench {

namespace {
using nlohmann::json;
namespace fs = std::filesystem;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The gnuplot scripts of bench/plots/, compiled in: {file name, text}.
struct PlotScript {
  const char* name;
  const char* text;
};
constexpr PlotScript kPlotScripts[] = {
#include "freight_plot_scripts.inc"
};

std::string plot_script(const std::string& name) {
  for (const PlotScript& s : kPlotScripts)
    if (name == s.name) return s.text;
  throw Error(fmt::format("freight bench: plot script {} was not compiled in", name));
}

double num(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : kNaN;
}
std::string str(const json& j, const char* key, const std::string& fallback = "") {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : fallback;
}
bool ok(const json& row) {
  return str(row, "status") == "ok";
}
bool is_cpu(const json& row) {
  return str(row, "device") == "cpu";
}

std::string cell(double v) {
  return std::isfinite(v) ? format_sig(v) : "";
}
std::string ratio_cell(double v) {
  return std::isfinite(v) ? fmt::format("{:.2f}x", v) : "";
}
std::string percent_cell(double v) {
  return std::isfinite(v) ? fmt::format("{:.1f}%", 100 * v) : "";
}

// ", caches apart" (at start and end), ", caches apart at the start", "... at the end" or
// "... within the row" (between its timed rounds only) for a row whose threads did not share a
// cache then (bench.cpp's "cache_sharing": the ratios of freight::measure_cache_sharing); ""
// otherwise.
std::string caches_apart_note(const json& row) {
  auto it = row.find("cache_sharing");
  if (it == row.end() || !it->is_object()) return "";
  const bool start = num(*it, "start") < kSharedCacheRatio,
             end = num(*it, "end") < kSharedCacheRatio,
             within = num(*it, "lowest") < kSharedCacheRatio;
  return start && end ? ", caches apart"
         : start      ? ", caches apart at the start"
         : end        ? ", caches apart at the end"
         : within     ? ", caches apart within the row"
                      : "";
}

std::string md_escape(std::string s) {
  std::string out;
  for (char c : s) {
    if (c == '|') out += "\\";
    out += c;
  }
  return out;
}

// A row's system, for grouping: "freight_cpu_t2", "freight_cuda0"; and its title.
std::string device_id(const json& row) {
  std::string d = str(row, "device");
  d.erase(std::remove(d.begin(), d.end(), ':'), d.end());
  return is_cpu(row) ? fmt::format("{}_t{}", d, int(num(row, "threads"))) : d;
}
std::string device_title(const json& row) {
  if (is_cpu(row)) {
    int t = int(num(row, "threads"));
    return fmt::format("cpu, {} thread{}", t, t == 1 ? "" : "s");
  }
  return str(row, "device");
}

// The largest CPU thread count among the rows (the "all threads" rows).
int max_cpu_threads(const json& rows) {
  int t = 0;
  for (const json& r : rows)
    if (is_cpu(r)) t = std::max(t, int(num(r, "threads")));
  return t;
}

std::string join(const std::vector<std::string>& v, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
  return out;
}

// A gnuplot array of strings, each quoted so that gnuplot expands nothing in it.
std::string gp_array(const std::string& name, const std::vector<std::string>& v) {
  std::vector<std::string> q;
  for (const std::string& s : v) q.push_back(gnuplot_string(s));
  return fmt::format("array {}[{}] = [{}]\n", name, v.size(), join(q, ", "));
}
}  // namespace

std::string format_sig(double v) {
  if (!std::isfinite(v)) return "";
  double a = std::fabs(v);
  if (a == 0) return "0";
  if (a >= 1000) return fmt::format("{:.0f}", v);
  if (a >= 100) return fmt::format("{:.0f}", v);
  if (a >= 10) return fmt::format("{:.1f}", v);
  if (a >= 1) return fmt::format("{:.2f}", v);
  if (a >= 0.001) return fmt::format("{:.3g}", v);
  return fmt::format("{:.2e}", v);
}

std::string format_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) b /= 1024, ++u;
  return u == 0 ? fmt::format("{:.0f} B", b) : fmt::format("{:.1f} {}", b, units[u]);
}

std::string markdown_report(const json& doc) {
  const json& rows = doc.at("rows");
  bool any_gpu = false, any_peak = false, any_pytorch = false;
  for (const json& r : rows) {
    any_gpu |= !is_cpu(r) && ok(r);
    any_peak |= std::isfinite(num(r, "fraction_of_peak"));
    any_pytorch |= r.contains("pytorch");
  }
  std::string md = "# freight bench\n\n";
  const json& fr = doc.at("freight");
  md += fmt::format("- Freight {}: {}\n", str(fr, "version"), str(fr, "build"));
  if (doc.contains("pytorch")) {
    const json& pt = doc["pytorch"];
    if (pt.contains("version"))
      md += fmt::format("- PyTorch {} (Python {}), {}\n", str(pt, "version"), str(pt, "python"),
                        str(pt, "summary"));
    else if (pt.contains("skipped"))
      md += fmt::format("- PyTorch: not run ({})\n", str(pt, "skipped"));
  }
  for (const json& d : doc.at("devices"))
    md += fmt::format("- {}: {}\n", str(d, "device"), str(d, "description"));
  if (doc.contains("peaks") && !doc["peaks"].empty()) {
    std::vector<std::string> ps;
    for (const json& p : doc["peaks"]) {
      int t = int(num(p, "threads"));
      ps.push_back(fmt::format("{}{} {} GFLOP/s (measured {}{}, spread {:.0f}%)", str(p, "device"),
                               t > 0 ? fmt::format(" {} thread{}", t, t == 1 ? "" : "s") : "",
                               format_sig(num(p, "fp32_gflops")), str(p, "measured_at"),
                               p.value("from_cache", false) ? ", from the peaks cache" : "",
                               100 * num(p, "spread")));
    }
    md +=
        "- peak fp32 GEMM (freight::peaks_for, the basis of \"of peak\"): " + join(ps, "; ") + "\n";
  }
  const json& s = doc.at("settings");
  md += fmt::format(
      "- {} precision; {}; random inputs of each model's shape; a training step is zero_grad, "
      "forward, cross-entropy, backward and the optimizer step\n",
      str(s, "precision"), str(s, "optimizer"));
  md += fmt::format(
      "- timing: about {:g} s of timed steps per row in at least {} rounds after at least {:g} s "
      "of warm-up; median (min-max) over rounds; rows whose first step takes over {:g} s are "
      "skipped\n",
      num(s, "seconds"), int(num(s, "min_rounds")), num(s, "warmup_seconds"),
      num(s, "max_step_seconds"));
  if (doc.contains("load_average")) {
    const json& la = doc["load_average"];
    md += fmt::format("- load average (1 min) {:.2f} at the start, {:.2f} at the end; {}\n",
                      la.at("start").at(0).get<double>(), la.at("end").at(0).get<double>(),
                      str(doc, "started_at"));
  }

  const auto torch_apart = [](const json& r) {
    return r.contains("pytorch") && !caches_apart_note(r["pytorch"]).empty();
  };
  if (std::any_of(rows.begin(), rows.end(),
                  [&](const json& r) { return !caches_apart_note(r).empty() || torch_apart(r); }))
    md += fmt::format(
        "- \"caches apart\": at the start or end of the row (or both), or between its timed "
        "rounds (\"within the row\"), the threads did not share a cache "
        "(freight::measure_cache_sharing: a thread read the data the other had just "
        "written at under {}x the rate it read its own). A virtual machine's host moves its vCPUs "
        "apart and back; work split over the threads then crosses between caches, and small "
        "steps run slower on all threads than on one\n",
        kSharedCacheRatio);
  if (const double given = num(s, "rerun_apart"); std::isfinite(given) && given > 0) {
    const int reruns = int(given);
    int rerun_rows = 0;
    for (const json& r : rows)
      for (const json* x : {&r, r.contains("pytorch") ? &r["pytorch"] : nullptr})
        if (x && x->contains("cache_sharing") && num((*x)["cache_sharing"], "runs") > 1)
          ++rerun_rows;
    md += fmt::format(
        "- --rerun-apart {}: a CPU row on two threads or more, Freight's or PyTorch's, whose "
        "threads did not share a cache at its start or end (or, Freight's, between its timed "
        "rounds) was run again, up to {} more times, "
        "each after waiting up to {:g} s for them to share one; {} row{} took more than one run "
        "(\"runs\" in the JSON); a row still marked apart never had a shared run\n",
        reruns, reruns, RerunOptions().wait_seconds, rerun_rows, rerun_rows == 1 ? "" : "s");
  }

  // ---- the table ----
  std::vector<std::string> head = {"model",
                                   "batch",
                                   "device",
                                   "threads",
                                   "step ms median (min-max)",
                                   "samples/s",
                                   "batch-1 latency ms",
                                   "GFLOP/s"};
  if (any_peak) head.push_back("of peak");
  head.push_back("peak memory");
  if (any_gpu) head.push_back("GPU/CPU speedup");
  if (any_pytorch) {
    for (const char* h : {"PyTorch step ms", "PyTorch config", "PyTorch latency ms",
                          "PyTorch peak memory", "Freight/PyTorch", "speedup"})
      head.push_back(h);
  }
  md += "\n## Training steps\n\n| " + join(head, " | ") + " |\n|";
  for (const std::string& h : head)  // text columns to the left, numbers to the right
    md += h == "model" || h == "device" || h == "PyTorch config" ? "---|" : "---:|";
  md += "\n";
  std::vector<std::string> skipped;
  for (const json& r : rows) {
    std::vector<std::string> c = {
        str(r, "model"), fmt::format("{}", int64_t(num(r, "batch_size"))), str(r, "device"),
        is_cpu(r) ? fmt::format("{}", int(num(r, "threads"))) + caches_apart_note(r) : "-"};
    if (ok(r)) {
      c.push_back(fmt::format("{} ({}-{})", cell(num(r, "median_ms")), cell(num(r, "min_ms")),
                              cell(num(r, "max_ms"))));
      c.push_back(fmt::format("{:.0f}", num(r, "samples_per_s")));
      c.push_back(cell(num(r, "latency_ms")));
      c.push_back(cell(num(r, "gflops")));
      if (any_peak) c.push_back(percent_cell(num(r, "fraction_of_peak")));
      c.push_back(std::isfinite(num(r, "peak_memory_bytes"))
                      ? format_bytes(num(r, "peak_memory_bytes"))
                      : "");
      if (any_gpu) c.push_back(ratio_cell(num(r, "gpu_speedup_over_cpu")));
    } else {
      c.push_back(str(r, "status"));
      skipped.push_back(fmt::format("{} batch {} on {}: {}", str(r, "model"),
                                    int64_t(num(r, "batch_size")), device_title(r),
                                    str(r, "reason")));
      size_t blanks = 4 + (any_peak ? 1 : 0) + (any_gpu ? 1 : 0);
      for (size_t i = 0; i < blanks; ++i) c.push_back("");
    }
    if (any_pytorch) {
      if (r.contains("pytorch") && r["pytorch"].contains("median_ms")) {
        const json& p = r["pytorch"];
        c.push_back(fmt::format("{} ({}-{})", cell(num(p, "median_ms")), cell(num(p, "min_ms")),
                                cell(num(p, "max_ms"))));
        c.push_back(str(p, "config") + caches_apart_note(p));
        c.push_back(cell(num(p, "latency_ms")));
        c.push_back(std::isfinite(num(p, "peak_memory_bytes"))
                        ? format_bytes(num(p, "peak_memory_bytes"))
                        : "");
        c.push_back(ratio_cell(num(p, "freight_over_pytorch")));
        c.push_back(ratio_cell(num(p, "speedup")));
      } else {
        std::string why = r.contains("pytorch") ? str(r["pytorch"], "status", "-") : "-";
        c.insert(c.end(), {why, "", "", "", "", ""});
      }
    }
    for (std::string& x : c) x = md_escape(x);
    md += "| " + join(c, " | ") + " |\n";
  }

  // ---- Freight against PyTorch, all threads and GPUs ----
  if (any_pytorch) {
    int tmax = max_cpu_threads(rows);
    md +=
        "\n## Freight against PyTorch\n\nCPU rows with all threads (PyTorch: the fastest of "
        "its configurations) and GPU rows; Freight/PyTorch is the ratio of step times (below "
        "1 is Freight faster), speedup its inverse.\n\n"
        "| model | batch | device | Freight ms | PyTorch ms | PyTorch config | Freight/PyTorch "
        "| speedup |\n|---|---|---|---:|---:|---|---:|---:|\n";
    for (const json& r : rows) {
      if (!ok(r) || (is_cpu(r) && int(num(r, "threads")) != tmax)) continue;
      if (!r.contains("pytorch") || !r["pytorch"].contains("median_ms")) continue;
      const json& p = r["pytorch"];
      md += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} |\n", str(r, "model"),
                        int64_t(num(r, "batch_size")), device_title(r) + caches_apart_note(r),
                        cell(num(r, "median_ms")), cell(num(p, "median_ms")),
                        str(p, "config") + caches_apart_note(p),
                        ratio_cell(num(p, "freight_over_pytorch")), ratio_cell(num(p, "speedup")));
    }
  }

  // ---- notes ----
  md += "\n## Notes\n\n";
  for (const json& n : doc.value("notes", json::array())) md += "- " + n.get<std::string>() + "\n";
  if (!skipped.empty()) {
    md += "- rows not measured:\n";
    for (const std::string& x : skipped) md += "  - " + x + "\n";
  }
  return md;
}

std::vector<std::string> write_plots(const json& doc, const std::string& dir,
                                     const std::string& stem, std::vector<std::string>& notes) {
  const json& rows = doc.at("rows");
  int tmax = max_cpu_threads(rows);

  // ---- speedup against batch size: kind -> model -> batch -> speedup ----
  std::vector<std::string> kind_order;
  std::map<std::string, std::string> kind_title;
  std::map<std::string, std::map<std::string, std::map<int64_t, double>>> speedups;
  std::vector<std::string> model_order;
  auto add = [&](const std::string& kind, const std::string& title, const std::string& model,
                 int64_t batch, double v) {
    if (!std::isfinite(v) || v <= 0) return;
    if (!kind_title.count(kind)) kind_order.push_back(kind), kind_title[kind] = title;
    if (std::find(model_order.begin(), model_order.end(), model) == model_order.end())
      model_order.push_back(model);
    speedups[kind][model][batch] = v;
  };
  // Freight 1-thread step times, for the thread scaling panel.
  std::map<std::pair<std::string, int64_t>, double> one_thread;
  for (const json& r : rows)
    if (ok(r) && is_cpu(r) && int(num(r, "threads")) == 1)
      one_thread[{str(r, "model"), int64_t(num(r, "batch_size"))}] = num(r, "median_ms");
  for (const json& r : rows) {
    if (!ok(r)) continue;
    std::string model = str(r, "model");
    int64_t batch = int64_t(num(r, "batch_size"));
    if (!is_cpu(r))
      add("gpu_" + device_id(r),
          fmt::format("{} over the CPU ({} threads), Freight", str(r, "device"), tmax), model,
          batch, num(r, "gpu_speedup_over_cpu"));
    if (r.contains("pytorch") && (!is_cpu(r) || int(num(r, "threads")) == tmax))
      add("pytorch_" + device_id(r),
          fmt::format("Freight over PyTorch, {}", is_cpu(r) ? "cpu, best-tuned" : str(r, "device")),
          model, batch, num(r["pytorch"], "speedup"));
  }
  if (tmax > 1)
    for (const json& r : rows)
      if (ok(r) && is_cpu(r) && int(num(r, "threads")) == tmax) {
        auto it = one_thread.find({str(r, "model"), int64_t(num(r, "batch_size"))});
        if (it != one_thread.end())
          add("threads", fmt::format("Freight on the CPU: {} threads over 1", tmax),
              str(r, "model"), int64_t(num(r, "batch_size")), it->second / num(r, "median_ms"));
      }

  // ---- throughput against latency: series -> model -> (latency, best samples/s) ----
  std::vector<std::string> series_order;
  std::map<std::string, std::string> series_title;
  std::map<std::string, std::map<std::string, std::pair<double, double>>> points;
  auto point = [&](const std::string& id, const std::string& title, const std::string& model,
                   double latency_ms, double samples_per_s) {
    if (!std::isfinite(latency_ms) || !std::isfinite(samples_per_s)) return;
    if (!series_title.count(id)) series_order.push_back(id), series_title[id] = title;
    auto& p = points[id][model];
    p.first = p.first > 0 ? std::min(p.first, latency_ms) : latency_ms;
    p.second = std::max(p.second, samples_per_s);
  };
  for (const json& r : rows) {
    if (!ok(r)) continue;
    std::string model = str(r, "model");
    point("freight_" + device_id(r), "Freight, " + device_title(r), model, num(r, "latency_ms"),
          num(r, "samples_per_s"));
    if (r.contains("pytorch") && r["pytorch"].contains("median_ms")) {
      const json& p = r["pytorch"];
      std::string title = "PyTorch, " + str(r, "device");
      if (is_cpu(r)) {
        int t = int(num(r, "threads"));
        title = t == 1 ? "PyTorch, cpu, 1 thread (faster BLAS)"
                       : fmt::format("PyTorch, cpu, best-tuned (up to {} threads)", t);
      }
      point("pytorch_" + device_id(r), title, model, num(p, "latency_ms"),
            num(r, "batch_size") / num(p, "median_ms") * 1e3);
    }
  }

  std::vector<std::string> images;
  if (!program_in_path("gnuplot")) {
    notes.push_back("plots: gnuplot is not installed (Debian: gnuplot-nox), so no PNG/SVG");
    return images;
  }
  std::string title = fmt::format("freight bench, {}", str(doc.at("devices").at(0), "name"));
  auto run_plot = [&](const std::string& kind, const std::string& vars) {
    std::string base = stem + "-" + kind;
    {
      std::ofstream gp(fs::path(dir) / (base + ".gp"));
      gp << "# written by freight bench\n"
         << "datafile = " << gnuplot_file(base + ".dat") << "\nout = " << gnuplot_file(base)
         << "\ntitle = " << gnuplot_string(title) << "\n"
         << vars << "\n"
         << plot_script(kind + ".gp");
    }
    // Absolute: gnuplot runs in `dir`, and a relative --out would be resolved twice.
    std::string log = fs::absolute(fs::path(dir) / (base + ".log")).string();
    fs::remove(log);
    int st = run_command(gnuplot_command(base + ".gp"), dir, log);
    if (st != 0) {
      notes.push_back(fmt::format("plots: gnuplot failed on {}.gp (exit status {}; see {}.log)",
                                  base, st, base));
      return;
    }
    fs::remove(log);
    images.push_back(base + ".png");
    images.push_back(base + ".svg");
  };

  if (kind_order.empty()) {
    notes.push_back(
        "plots: no speedup to plot (it needs a GPU row, PyTorch rows or both 1 and "
        "all CPU threads)");
  } else {
    std::ofstream dat(fs::path(dir) / (stem + "-speedup.dat"));
    dat << "# kind model batch speedup\n";
    std::vector<std::string> ids, titles, models;
    for (const std::string& k : kind_order) {
      std::vector<std::string> ms;
      for (const std::string& m : model_order) {
        auto it = speedups[k].find(m);
        if (it == speedups[k].end()) continue;
        // Ids and model names are bare words in the data and in the script's word lists
        // (matched with `eq`): the same spelling in both, and no row or column broken.
        ms.push_back(gnuplot_data_word(m));
        for (const auto& [b, v] : it->second)
          dat << gnuplot_data_word(k) << ' ' << ms.back() << ' ' << b << ' ' << v << '\n';
      }
      ids.push_back(gnuplot_data_word(k));
      titles.push_back(kind_title[k]);
      models.push_back(join(ms, " "));
    }
    dat.close();
    run_plot("speedup", fmt::format("nkinds = {}\n", ids.size()) + gp_array("kind_id", ids) +
                            gp_array("kind_title", titles) + gp_array("kind_models", models));
  }
  if (series_order.empty()) {
    notes.push_back("plots: no row has both a latency and a throughput to plot");
  } else {
    std::ofstream dat(fs::path(dir) / (stem + "-throughput-latency.dat"));
    dat << "# series model latency_ms samples_per_s\n";
    std::vector<std::string> ids, titles;
    for (const std::string& id : series_order) {
      ids.push_back(gnuplot_data_word(id));
      titles.push_back(series_title[id]);
      for (const auto& [m, p] : points[id])
        dat << ids.back() << ' ' << gnuplot_data_word(m) << ' ' << p.first << ' ' << p.second
            << '\n';
    }
    dat.close();
    run_plot("throughput-latency", fmt::format("nseries = {}\n", series_order.size()) +
                                       gp_array("series_id", ids) +
                                       gp_array("series_title", titles));
  }
  return images;
}

}  // namespace freight::bench
