// freight devices: the CPU and the GPUs this process can use; with --measure (or --peaks), their
// measured peaks: GEMM rate, memory bandwidth, host<->device bandwidth, per-op latency.
#include <fmt/format.h>

#include <ctime>

#include "commands.h"
#include "flags.h"
#include "format.h"
#include "freight/device.h"
#include "freight/dist.h"
#include "freight/peaks.h"
#include "freight/plan.h"
#include "freight/runtime.h"
#include "launch.h"

namespace freight::cli {

namespace {
std::string rate(double bytes_per_s) {
  return fmt::format("{:.1f} GB/s", bytes_per_s / 1e9);
}
std::string gflops(double f) {
  return f >= 1e12 ? fmt::format("{:.1f} TFLOP/s", f / 1e12)
                   : fmt::format("{:.1f} GFLOP/s", f / 1e9);
}
std::string micro(double s) {
  return fmt::format("{:.2f} µs", s * 1e6);
}

void print_peaks(const DevicePeaks& p) {
  fmt::print("         measured peaks ({}{}; medians of repeated runs{}):\n",
             p.from_cache ? "cached, measured " : "measured ", p.measured_at,
             p.device.is_cpu() ? ", timed by CPU clock" : "");
  fmt::print("           fp32 GEMM      {} ({}x{} square{}; runs spread {:.0f}%)\n",
             gflops(p.fp32_flops), p.gemm_n, p.gemm_n,
             p.device.is_cpu() ? fmt::format(", {} threads", p.threads) : std::string(),
             100 * p.spread);
  int cores = int(list_devices().front().compute_units);
  if (p.load > cores)
    fmt::print(
        "           note: measured while the host was busy (load {:.1f} on {} hardware "
        "threads): the figures may be low; run --measure again when it is quiet\n",
        p.load, cores);
  if (p.tf32_flops > 0) fmt::print("           tf32 GEMM      {}\n", gflops(p.tf32_flops));
  if (p.bf16_flops > 0) fmt::print("           bf16 GEMM      {}\n", gflops(p.bf16_flops));
  fmt::print("           GEMM start-up  {} (t = start-up + FLOPs / peak, from small GEMMs)\n",
             micro(p.gemm_overhead_s));
  fmt::print("           memory         {} (a large copy, reads + writes)\n",
             rate(p.mem_bandwidth));
  if (p.levels.size() > 1) {
    std::string by;
    for (size_t i = 0; i + 1 < p.levels.size(); ++i)
      by += fmt::format("{} up to {}, ", rate(p.levels[i].bandwidth),
                        format_bytes(p.levels[i].bytes));
    fmt::print("           by working set {}memory beyond (caches)\n", by);
  }
  fmt::print("           ridge point    {:.1f} FLOP/byte (below it an op is memory-bound)\n",
             p.ridge());
  if (p.device.is_cuda()) {
    fmt::print("           host->device   {} pinned, {} pageable\n", rate(p.h2d_pinned),
               rate(p.h2d_pageable));
    fmt::print("           device->host   {} pinned, {} pageable\n", rate(p.d2h_pinned),
               rate(p.d2h_pageable));
    fmt::print("           kernel launch  {} (empty kernel, back to back)\n", micro(p.launch_s));
  }
  fmt::print("           tiny op        {} ({}: checks, allocation, kernel)\n", micro(p.op_s),
             p.device.is_cpu() ? "framework overhead per op" : "through Freight");
  fmt::print("           tiny op, tape  {} (recorded for autograd: forward + backward node)\n",
             micro(p.train_op_s));
  if (p.parallel_measured && p.parallel_contended)
    fmt::print(
        "           thread split   not used: another process held a core through every round\n"
        "                          of a ladder (measured {});\n"
        "                          in force: {}.\n"
        "                          Measure again on a quiet machine.\n",
        p.parallel.describe(), parallel_thresholds().describe());
  else if (p.parallel_measured && !p.parallel_measured_at.empty() &&
           p.parallel_measured_at != p.measured_at)
    fmt::print(
        "           thread split   from {}\n"
        "                          (kept from {}: another process held a core through every "
        "round of a ladder of this measurement)\n",
        p.parallel.describe(), p.parallel_measured_at);
  else if (p.parallel_measured)
    fmt::print("           thread split   from {} (where splitting beat one thread)\n",
               p.parallel.describe());
  if (!p.efficiency.empty()) {
    std::string line;
    int n = 0;
    for (const auto& [type, e] : p.efficiency) {
      line += fmt::format("{}{} {:.0f}%",
                          n == 0       ? ""
                          : n % 6 == 0 ? ",\n                          "
                                       : ", ",
                          type, 100 * e);
      ++n;
    }
    fmt::print(
        "           Freight's kernels, share of the roofline reached by reference layers "
        "(forward + backward):\n                          {}\n",
        line);
  }
}
std::string now_utc() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

std::string micro_seconds(double s) {
  return s < 1e-3 ? fmt::format("{:.1f} µs", s * 1e6) : fmt::format("{:.2f} ms", s * 1e3);
}

std::vector<int64_t> all_reduce_sizes() {
  return {4, 4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20};
}

// The sums' times over `over` (the transport and the memory summed).
void print_link(const std::vector<dist::AllReduceTiming>& link, const char* over) {
  fmt::print("         all-reduce over {} (in-place float32 sum; median, slowest rank):\n", over);
  for (const dist::AllReduceTiming& t : link)
    fmt::print("         {:>10}  {:>9}  bus bandwidth {:.2f} GB/s\n", format_bytes(double(t.bytes)),
               micro_seconds(t.seconds), t.bus_bytes_per_second / 1e9);
  if (!link.empty()) {
    const dist::AllReduceTiming* best = &link.front();
    for (const dist::AllReduceTiming& t : link)
      if (t.bus_bytes_per_second > best->bus_bytes_per_second) best = &t;
    fmt::print("         latency {} (the smallest sum); bus bandwidth up to {:.2f} GB/s (at {})\n",
               micro_seconds(link.front().seconds), best->bus_bytes_per_second / 1e9,
               format_bytes(double(best->bytes)));
  }
}
}  // namespace

void add_devices(CLI::App& app) {
  struct Opts {
    bool measure = false, peaks = false;
    int nproc = 0;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand("devices", "List the CPU and the GPUs Freight can use");
  cmd->add_flag("--measure", o->measure,
                "Measure each device's peaks now (GEMM rate, memory and bus bandwidth, latency) "
                "and cache them for explain, plan and bench");
  cmd->add_flag("--peaks", o->peaks,
                "Show each device's peaks from the cache (measured first when not cached)");
  cmd->add_option("--nproc", o->nproc,
                  "With --measure: also time sums over N processes of this machine (starts "
                  "mpirun), the all-reduce of data-parallel training")
      ->check(in_range(limits::nproc));
  cmd->callback([o] {
    run_under_mpirun_if_asked(o->nproc);
    const dist::WorldInfo& world = dist::launched_by_mpi() ? dist::world() : dist::WorldInfo{};
    if (world.size > 1) {
      // Every rank takes part in the link's measurement; rank 0 then reports it, and its devices.
      std::vector<dist::AllReduceTiming> link, gpu_link;
      if (o->measure) link = dist::measure_all_reduce(all_reduce_sizes());
      // NCCL too when every rank has a GPU of its own (agreed, so that all or none measure).
      const bool gpus =
          dist::on_every_rank(cuda_available() && world.local_rank < cuda_device_count(),
                              "whether every rank has a GPU") &&
          o->measure;
      if (gpus)
        gpu_link = dist::measure_all_reduce(all_reduce_sizes(), Device::cuda(world.local_rank));
      if (world.rank != 0) return;
      const int hosts = world.local_size == world.size ? 1 : 2;
      fmt::print("ranks    {} processes (MPI) on {}; this is rank 0 on {}\n", world.size,
                 hosts == 1 ? "1 host" : "several hosts", world.host);
      if (!o->measure) fmt::print("         (--measure times the sums over the ranks)\n");
      if (!link.empty()) {
        print_link(link, "MPI, host memory");
        std::vector<std::pair<double, double>> times;
        for (const dist::AllReduceTiming& t : link) times.emplace_back(double(t.bytes), t.seconds);
        LinkPeaks l = link_from_measurement(times, world.size, hosts);
        l.measured_at = now_utc();
        save_link(l, peaks_cache_path());
        fmt::print("         saved for freight plan --ranks {} ({})\n", world.size,
                   peaks_cache_path());
      }
      if (!gpu_link.empty()) {
        print_link(gpu_link, "NCCL, GPU memory (cuda:<local rank>)");
        std::vector<std::pair<double, double>> times;
        for (const dist::AllReduceTiming& t : gpu_link)
          times.emplace_back(double(t.bytes), t.seconds);
        LinkPeaks l = link_from_measurement(times, world.size, hosts);
        l.kind = hosts == 1 ? "nccl, 1 host" : "nccl, several hosts";
        l.measured_at = now_utc();
        save_link(l, peaks_cache_path());
        fmt::print("         saved for freight plan --nodes ({})\n", peaks_cache_path());
      }
      // A rank's share of the cores would be measured (and cached) as the device's peaks.
      if (o->measure || o->peaks)
        fmt::print(
            "         (device peaks are measured outside mpirun: freight devices "
            "--measure)\n");
      o->measure = o->peaks = false;
    }
    bool measured = false;
    for (const DeviceInfo& d : list_devices()) {
      if (d.device.is_cpu()) {
        fmt::print(
            "cpu      {}\n         {} hardware threads, {} memory ({} available)\n"
            "         {}\n",
            d.name, d.compute_units, format_bytes(double(d.memory_total)),
            format_bytes(double(d.memory_free)), d.details);
        std::string runs;
        for (const std::string& level : cpu_isas_supported())
          runs += (runs.empty() ? "" : ", ") + level;
        fmt::print("         CPU kernels: {} ({}; this CPU runs: {})\n", cpu_kernel_isa(),
                   cpu_kernel_isa_reason(), runs);
        if (const CacheSharing c = measure_cache_sharing(); c.measured)
          fmt::print("         cache between threads: {}{}\n", c.describe(),
                     c.shared() ? ""
                                : "; now small steps split over the threads can run slower "
                                  "than on one (--threads 1)");
      } else {
        fmt::print(
            "{:<8} {}\n         compute capability {}, {} multiprocessors, {} memory ({} "
            "free)\n         driver {}, runtime {}{}\n",
            d.device.str(), d.name, d.compute_capability, d.compute_units,
            format_bytes(double(d.memory_total)), format_bytes(double(d.memory_free)),
            d.driver_version, d.runtime_version,
            d.details.empty() ? "" : "\n         " + d.details);
      }
      if (o->measure || o->peaks) {
        std::fflush(stdout);
        print_peaks(o->measure ? measure_peaks(d.device) : peaks_for(d.device));
        measured = true;
      }
    }
    std::string why;
    if (!cuda_available(&why)) fmt::print("no GPU: {}\n", why);
    if (measured) fmt::print("peaks cache: {}\n", peaks_cache_path());
  });
}

}  // namespace freight::cli
