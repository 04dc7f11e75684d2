// freight plan: predicted time per epoch and memory on every device present, from the model's
// FLOPs and bytes per layer and the devices' measured peaks, with a recommendation.
#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "flags.h"
#include "format.h"
#include "freight/error.h"
#include "freight/plan.h"

namespace freight::cli {

namespace {

std::string seconds(double s) {
  if (s < 1e-3) return fmt::format("{:.0f} µs", s * 1e6);
  if (s < 1) return fmt::format("{:.2f} ms", s * 1e3);
  return format_duration(s);
}

}  // namespace

void add_plan(CLI::App& app) {
  struct Opts {
    PlanOptions p;
    std::string json;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "plan",
      "Predict time per epoch and memory on each device from the model's FLOPs and bytes and "
      "the measured peaks, and recommend the hardware");
  cmd->add_option("--model,-m", o->p.model, "Zoo model name or model file")->capture_default_str();
  // 2^40 samples is beyond any dataset and keeps samples + batch size - 1 far from overflow.
  cmd->add_option("--samples,-n", o->p.samples, "Training samples per epoch")
      ->capture_default_str()
      ->check(in_range(IntRange{1, int64_t(1) << 40}));
  cmd->add_option("--epochs,-e", o->p.epochs, "Epochs")
      ->capture_default_str()
      ->check(in_range(limits::epochs));
  cmd->add_option_function<int64_t>(
         "--batch-size,-b", [o](const int64_t& v) { o->p.batch_size = v; },
         "Batch size (default: the model's)")
      ->check(in_range(limits::batch_size));
  cmd->add_option("--optimizer", o->p.optimizer, "Optimizer (default: the model's)")
      ->check(one_of(limits::optimizers));
  cmd->add_flag("!--no-reference", o->p.reference_gpu,
                "Without a GPU, do not add the datasheet H100 for comparison");
  cmd->add_option("--ranks", o->p.ranks,
                  "Add the CPU trained by N data-parallel ranks on this host (needs `freight "
                  "devices --measure --nproc N`)")
      ->check(in_range(limits::nproc));
  cmd->add_option("--nodes", o->p.nodes,
                  "Project data-parallel training on this many GPU nodes (with --gpus-per-node)")
      ->check(in_range(limits::nproc));
  cmd->add_option("--gpus-per-node", o->p.gpus_per_node, "GPUs per node (with --nodes)")
      ->check(in_range(IntRange{1, 64}));
  cmd->add_option("--json", o->json, "Also write the plan as JSON to this file");
  cmd->callback([o] {
    PlanResult r = plan(o->p);
    fmt::print(
        "plan {}: {} parameters, {}; {} samples in batches of {} = {} steps per epoch, {} "
        "epoch{}\n",
        r.model, r.params, r.optimizer_describe, r.samples, r.batch_size, r.steps_per_epoch,
        r.epochs, r.epochs == 1 ? "" : "s");
    fmt::print("a step: {} FLOP, {} moved, about {:.0f} kernel calls; an epoch: {} FLOP\n\n",
               format_count(r.flops_per_step), format_bytes(r.bytes_per_step), r.ops_per_step,
               format_count(r.flops_per_step * double(r.steps_per_epoch)));
    size_t wl = 6;
    for (const DevicePlan& d : r.devices) wl = std::max(wl, d.label.size());
    fmt::print("{:<{}}  {:>10} {:>10} {:>10}  {:>9} {:>9} {:>9} {:>9}  {:<9} {:>10}\n", "device",
               wl, "epoch", "total", "step", "compute", "memory", "overhead", "transfer", "bound",
               "memory");
    for (const DevicePlan& d : r.devices) {
      fmt::print(
          "{:<{}}  {:>10} {:>10} {:>10}  {:>9} {:>9} {:>9} {:>9}  {:<9} {:>10}{}\n", d.label, wl,
          seconds(d.epoch_s), seconds(d.total_s), seconds(d.step_s), seconds(d.compute_s),
          seconds(d.memory_s), seconds(d.overhead_s), seconds(d.transfer_s + d.sync_s), d.dominant,
          format_bytes(d.total_bytes),
          d.fits ? "" : fmt::format("  (only {} available)", format_bytes(d.available_bytes)));
    }
    const DevicePlan& c = r.devices.front();
    fmt::print(
        "\nmemory for a batch of {}: parameters {}, gradients {}, optimizer state {}, "
        "activations {}\n",
        r.batch_size, format_bytes(c.params_bytes), format_bytes(c.grads_bytes),
        format_bytes(c.optimizer_bytes), format_bytes(c.activation_bytes));
    for (const DevicePlan& d : r.devices) {
      const DevicePeaks& p = d.peaks;
      fmt::print("{}: {}\n", d.label,
                 d.measured ? fmt::format("peaks measured {} ({}): {:.1f} GFLOP/s, {:.1f} GB/s, "
                                          "op {:.2f} µs{}",
                                          p.measured_at, p.from_cache ? "cached" : "just now",
                                          p.fp32_flops / 1e9, p.mem_bandwidth / 1e9, p.op_s * 1e6,
                                          p.load > 2 ? fmt::format(", host load {:.1f}", p.load)
                                                     : std::string())
                            : fmt::format("{} (not measured)", p.name));
    }
    fmt::print("(training loops only; evaluation and data loading from disk are not included)\n");
    if (r.contention > 1.3)
      fmt::print(
          "note: the host is busy now (work runs {:.1f}x slower than on a quiet machine); "
          "the times above are for a quiet one, expect about {:.1f}x longer at this load\n",
          r.contention, r.contention);
    for (const DevicePlan& d : r.devices)
      if (d.ranks > 1)
        fmt::print(
            "{}: each step adds the gradient's sum over the ranks, {} ({} of gradient, the "
            "link measured by freight devices --measure --nproc)\n",
            d.label, seconds(d.comm_s), format_bytes(d.grads_bytes));
    if (!r.scaling.empty()) {
      fmt::print(
          "\ndata parallel on {} at a global batch of {} ({}; backward hides the sums as "
          "long as it lasts):\n",
          r.scaling_device, r.batch_size, r.scaling_links);
      fmt::print("{:>6} {:>6}  {:>10} {:>10} {:>10} {:>10} {:>10}  {:>8} {:>10}\n", "GPUs", "nodes",
                 "compute", "all-reduce", "exposed", "step", "epoch", "speedup", "efficiency");
      for (const ScalePoint& s : r.scaling)
        fmt::print("{:>6} {:>6}  {:>10} {:>10} {:>10} {:>10} {:>10}  {:>7.1f}x {:>9.0f}%\n", s.gpus,
                   s.nodes, seconds(s.compute_s), seconds(s.comm_s), seconds(s.exposed_comm_s),
                   seconds(s.step_s), seconds(s.epoch_s), s.speedup, 100 * s.efficiency);
      if (r.comm_dominates_from)
        fmt::print(
            "communication dominates from {} GPUs: the sums outlast the compute that "
            "could hide them\n",
            r.comm_dominates_from);
      else
        fmt::print("communication stays below compute up to {} GPUs\n", r.scaling.back().gpus);
    }
    fmt::print("\nrecommendation: {}: {}\n",
               r.recommendation == "cpu"   ? "the CPU"
               : r.recommendation == "gpu" ? "one GPU"
                                           : "several GPUs",
               r.reason);
    if (!o->json.empty()) {
      nlohmann::json devices = nlohmann::json::array();
      for (const DevicePlan& d : r.devices)
        devices.push_back({{"label", d.label},
                           {"measured", d.measured},
                           {"gpus", d.gpus},
                           {"epoch_s", d.epoch_s},
                           {"total_s", d.total_s},
                           {"step_s", d.step_s},
                           {"compute_s", d.compute_s},
                           {"memory_s", d.memory_s},
                           {"overhead_s", d.overhead_s},
                           {"transfer_s", d.transfer_s},
                           {"ranks", d.ranks},
                           {"comm_s", d.comm_s},
                           {"bound", d.dominant},
                           {"memory_bytes", d.total_bytes},
                           {"fits", d.fits}});
      nlohmann::json j{{"model", r.model},
                       {"samples", r.samples},
                       {"epochs", r.epochs},
                       {"batch_size", r.batch_size},
                       {"steps_per_epoch", r.steps_per_epoch},
                       {"flops_per_step", r.flops_per_step},
                       {"bytes_per_step", r.bytes_per_step},
                       {"devices", devices},
                       {"scaling",
                        [&] {
                          nlohmann::json a = nlohmann::json::array();
                          for (const ScalePoint& s : r.scaling)
                            a.push_back({{"gpus", s.gpus},
                                         {"nodes", s.nodes},
                                         {"compute_s", s.compute_s},
                                         {"comm_s", s.comm_s},
                                         {"exposed_comm_s", s.exposed_comm_s},
                                         {"step_s", s.step_s},
                                         {"efficiency", s.efficiency}});
                          return a;
                        }()},
                       {"recommendation", r.recommendation},
                       {"reason", r.reason}};
      std::ofstream f(o->json);
      FREIGHT_CHECK(f.good(),
                    fmt::format("--json: cannot write '{}': {}", o->json, std::strerror(errno)));
      f << j.dump(2) << "\n";
    }
  });
}

}  // namespace freight::cli
