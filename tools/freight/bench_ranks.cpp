#include "bench_ranks.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "bench/subprocess.h"
#include "freight/error.h"
#include "freight/plan.h"
#include "launch.h"

namespace freight::cli {

namespace {
using nlohmann::json;
namespace fs = std::filesystem;

// `freight train` on synthetic data for `epochs` epochs of `samples` samples, in one process
// (nproc 1, all cores) or on `nproc` ranks under mpirun; returns the last epoch's metrics record.
json train_epochs(const nn::ModelSpec& spec, int64_t batch, int64_t samples, int epochs, int nproc,
                  const RanksBenchOptions& o) {
  std::string stem = fmt::format("{}-ranks-{}-b{}-np{}", o.name, spec.name, batch, nproc);
  std::string metrics = (fs::path(o.log_dir) / (stem + ".jsonl")).string();
  std::string log = (fs::path(o.log_dir) / (stem + ".log")).string();
  fs::remove(metrics);
  fs::remove(log);
  // SGD with momentum and no schedule, as the rest of freight bench times.
  std::vector<std::string> args{"train", "--model", spec.path, "--data", "synthetic"};
  for (const auto& [flag, value] :
       std::vector<std::pair<const char*, std::string>>{{"--limit-train", std::to_string(samples)},
                                                        {"--limit-test", std::to_string(batch)},
                                                        {"--epochs", std::to_string(epochs)},
                                                        {"--batch-size", std::to_string(batch)},
                                                        {"--optimizer", "sgd"},
                                                        {"--lr", "0.01"},
                                                        {"--momentum", "0.9"},
                                                        {"--schedule", "none"},
                                                        {"--seed", "1"},
                                                        {"--metrics", metrics}})
    args.insert(args.end(), {flag, value});
  args.push_back("--no-save");
  std::vector<std::string> cmd;
  if (nproc == 1) {
    cmd.push_back(this_program());
    cmd.insert(cmd.end(), args.begin(), args.end());
  } else {
    cmd = mpirun_command(nproc, find_mpirun("--nproc"), this_program(), args);
  }
  int rc = bench::run_command(cmd, "", log);
  std::ifstream f(metrics);
  std::string last;
  for (std::string l; std::getline(f, l);)
    if (!l.empty()) last = l;
  FREIGHT_CHECK(rc == 0 && !last.empty(),
                fmt::format("{} on {} rank{} failed (exit {}); {}", spec.name, nproc,
                            nproc == 1 ? "" : "s", rc, bench::log_tail(log)));
  return json::parse(last);
}

// What `freight plan --ranks nproc` predicts for a step (0 when it cannot: no measured link).
double planned_step_seconds(const nn::ModelSpec& spec, int64_t batch, int64_t samples, int nproc,
                            std::string& why) {
  try {
    PlanOptions po;
    po.model = spec.path;
    po.samples = samples;
    po.batch_size = batch;
    po.optimizer = "sgd";
    po.reference_gpu = false;
    po.ranks = nproc;
    PlanResult r = plan(po);
    for (const DevicePlan& d : r.devices)
      if (d.peaks.device.is_cpu() && d.ranks == nproc && d.gpus == 1) return d.step_s;
    why = "the plan has no such row";
  } catch (const Error& e) {
    why = e.what();
  }
  return 0;
}
}  // namespace

json bench_ranks(const std::vector<nn::ModelSpec>& specs, const std::vector<int64_t>& batches,
                 const RanksBenchOptions& o) {
  std::vector<int> counts{1};
  for (int n : o.nproc)
    if (std::find(counts.begin(), counts.end(), n) == counts.end()) counts.push_back(n);
  json rows = json::array();
  for (const nn::ModelSpec& spec : specs) {
    for (int64_t batch : batches) {
      // A short probe in one process sizes the epoch to last about o.seconds.
      int64_t steps = 4;
      double one_steps_per_s = 0;
      for (int n : counts) {
        fmt::print(stderr, "ranks: {} batch {} on {} rank{}: ", spec.name, batch, n,
                   n == 1 ? "" : "s");
        std::fflush(stderr);
        json row{{"model", spec.name}, {"batch_size", batch}, {"ranks", n}};
        try {
          FREIGHT_CHECK(batch >= n, fmt::format("--batch-sizes {} is below {} ranks", batch, n));
          if (n == 1) {  // (its second epoch: the first pays for the start)
            json probe = train_epochs(spec, batch, 4 * batch, 2, 1, o);
            double step_s = probe.at("train_seconds").get<double>() / 4.0;
            steps = std::clamp<int64_t>(int64_t(std::ceil(o.seconds / std::max(step_s, 1e-6))), 4,
                                        1000);
          }
          // Two epochs: the first warms up (allocator, threads, MPI's connections), the
          // second is timed.
          json m = train_epochs(spec, batch, steps * batch, 2, n, o);
          double steps_per_s = m.at("samples_per_second").get<double>() / double(batch);
          row["samples"] = steps * batch;
          row["steps_per_second"] = steps_per_s;
          if (n == 1) one_steps_per_s = steps_per_s;
          if (one_steps_per_s > 0) row["vs_one_process"] = steps_per_s / one_steps_per_s;
          std::string why;
          double plan_s = planned_step_seconds(spec, batch, steps * batch, n, why);
          if (plan_s > 0) {
            row["plan_steps_per_second"] = 1.0 / plan_s;
            row["measured_over_plan"] = steps_per_s * plan_s;
          } else {
            row["plan_note"] = why;
          }
          row["status"] = "ok";
          fmt::print(stderr, "{:.1f} steps/s\n", steps_per_s);
        } catch (const Error& e) {
          row["status"] = "error";
          row["error"] = e.what();
          fmt::print(stderr, "error\n");
        }
        rows.push_back(row);
      }
    }
  }
  return rows;
}

std::string ranks_markdown(const json& rows) {
  std::string md =
      "\n## Data parallel on this host's CPU (`--nproc`)\n\n"
      "| model | batch | ranks | steps/s | vs 1 process | plan steps/s | measured / plan |\n"
      "|---|---:|---:|---:|---:|---:|---:|\n";
  std::vector<std::string> notes;
  for (const json& r : rows) {
    if (r.value("status", "") != "ok") {
      md += fmt::format("| {} | {} | {} | error | | | |\n", r.value("model", ""),
                        r.value("batch_size", 0), r.value("ranks", 0));
      notes.push_back(r.value("error", ""));
      continue;
    }
    auto num = [&](const char* k, const char* f) {
      return r.contains(k) ? fmt::format(fmt::runtime(f), r[k].get<double>()) : std::string("-");
    };
    md += fmt::format("| {} | {} | {} | {} | {} | {} | {} |\n", r["model"].get<std::string>(),
                      r["batch_size"].get<int64_t>(), r["ranks"].get<int>(),
                      num("steps_per_second", "{:.1f}"), num("vs_one_process", "{:.2f}x"),
                      num("plan_steps_per_second", "{:.1f}"), num("measured_over_plan", "{:.2f}x"));
    if (r.contains("plan_note")) notes.push_back("plan: " + r["plan_note"].get<std::string>());
  }
  md +=
      "\nEach row trains 2 epochs of synthetic data with `freight train` (SGD, momentum 0.9) and "
      "times the second; `--batch-size` is the global batch, split over the ranks. One process "
      "uses every core, and so do the ranks together (mpirun binds each to its share), so "
      "1.00x means the ranks lose nothing to their sums. The plan is `freight plan --ranks N` "
      "on the link measured by `freight devices --measure --nproc N`.\n";
  std::sort(notes.begin(), notes.end());
  notes.erase(std::unique(notes.begin(), notes.end()), notes.end());
  for (const std::string& n : notes) md += "\n- " + n;
  if (!notes.empty()) md += "\n";
  return md;
}

}  // namespace freight::cli
