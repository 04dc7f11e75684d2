// freight bench: times whole training steps of zoo models over batch sizes and devices (the CPU
// with one and with all threads, each GPU), optionally beside PyTorch running the same networks
// (bench/pytorch/step_bench.py) in the same run. Writes a Markdown table (stdout and
// <out>/<name>.md), one JSON record per row (<out>/<name>.json) and two plots through gnuplot
// (speedup against batch size; training throughput against batch-1 latency), PNG and SVG.
//
// Conventions (also written into every report):
//   - a training step is zero_grad, forward, cross-entropy, backward and SGD (momentum 0.9,
//     lr 0.01) on random inputs of the model's shape, fp32;
//   - achieved FLOP/s = 3 x nn::Module::flops(batch input shape) / step time: the forward pass
//     counted with a multiply-add as 2 FLOPs, the backward pass as twice the forward (gradients
//     with respect to inputs and to weights); loss, optimizer and bookkeeping are not counted;
//   - batch-1 latency: one forward call on one sample, eval mode, no autograd, synchronised;
//   - timing rule: src/bench/timing.h (shared with the PyTorch script).
// Environment: OPENBLAS_CORETYPE is removed for both sides (OpenBLAS reads it when it loads, so
// freight bench restarts itself without it); PyTorch runs with glibc's heap trimming and mmap
// threshold turned off (kPyTorchMallocEnv) so that its freed blocks are reused, not returned to
// the system and faulted back in at every step, the way Freight's caching allocator reuses them.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <thread>

#include "bench/cache_reruns.h"
#include "bench/gnuplot.h"
#include "bench/report.h"
#include "bench/subprocess.h"
#include "bench/timing.h"
#include "bench_ranks.h"
#include "commands.h"
#include "flags.h"
#include "freight/device.h"
#include "freight/error.h"
#include "freight/nn/model_file.h"
#include "freight/peaks.h"
#include "freight/runtime.h"

#ifndef FREIGHT_VERSION
#define FREIGHT_VERSION "unknown"
#endif

namespace freight::cli {

namespace {
using nlohmann::json;
namespace fs = std::filesystem;

const char* const kDefaultModels =
    "mlp,mnist-cnn,lenet5,lstm-rows,fcn5,alexnet-cifar,resnet56-cifar,lstm-ptb";
const char* const kQuickModels = "mlp,mnist-cnn,lenet5,lstm-rows";
const char* const kFlopsConvention =
    "GFLOP/s = FLOPs of the step's forward and backward passes (freight::training_flops, a "
    "multiply-add counted as 2) / step time: each layer's forward (nn::Module::flops) and its "
    "backward by layer type (a Linear or Conv2d twice its forward for dW and dX, once where "
    "its input is the data, which needs no dX); the loss and the optimizer update not at "
    "all; the same count is used for PyTorch";
// glibc malloc settings for the PyTorch side: never trim the heap (64 GiB) and never serve a
// block by mmap below 4 GiB, so that freed tensors are reused rather than unmapped and faulted in
// again at every step (PyTorch's CPU allocator is plain malloc/free).
const std::vector<std::pair<std::string, std::string>> kPyTorchMallocEnv = {
    {"MALLOC_TRIM_THRESHOLD_", "68719476736"}, {"MALLOC_MMAP_THRESHOLD_", "4294967296"}};
const char* const kOpenBlasOpenMpDirs[] = {"/usr/lib/x86_64-linux-gnu/openblas-openmp",
                                           "/usr/lib/aarch64-linux-gnu/openblas-openmp"};

struct Options {
  std::string models, batch_sizes, devices = "cpu,cuda", threads, precision = "fp32";
  std::string out = "freight-bench", name = "bench", vs, nproc;
  std::string python = "/usr/bin/python3", pytorch_script;
  bool quick = false, keep_coretype = false, no_plots = false, remeasure_peaks = false;
  bool pytorch_compile = false;   // also torch.compile on the CPU
  std::optional<double> seconds;  // unset: 1, or 0.25 with --quick
  double max_step_seconds = 2.5;
  int min_rounds = 3;
  int rerun_apart = 0;  // reruns of a row timed while the threads' caches were apart
};

std::vector<std::string> split(const std::string& s, char sep = ',') {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep)) {
    size_t a = item.find_first_not_of(" \t"), b = item.find_last_not_of(" \t");
    if (a != std::string::npos) out.push_back(item.substr(a, b - a + 1));
  }
  return out;
}

int64_t parse_positive(const std::string& flag, const std::string& text) {
  try {
    size_t used = 0;
    long long v = std::stoll(text, &used);
    if (used == text.size() && v > 0) return v;
  } catch (...) {
  }
  throw Error(fmt::format("{}: '{}' is not a positive integer", flag, text));
}

std::array<double, 3> load_average() {
  std::array<double, 3> la{0, 0, 0};
  std::ifstream f("/proc/loadavg");
  f >> la[0] >> la[1] >> la[2];
  return la;
}

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// OpenBLAS reads OPENBLAS_CORETYPE once, when it is loaded, so the only way to benchmark without
// it is a fresh process: run this same command again with the variable removed.
void restart_without_coretype() {
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  if (!coretype) return;
  std::ifstream f("/proc/self/cmdline", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  size_t start = 0;
  for (size_t i = 0; i < all.size(); ++i)
    if (all[i] == '\0') args.push_back(all.substr(start, i - start)), start = i + 1;
  FREIGHT_CHECK(!args.empty(),
                "freight bench: cannot read its own command line to restart "
                "without OPENBLAS_CORETYPE (use --keep-openblas-coretype)");
  ::setenv("FREIGHT_BENCH_REMOVED_CORETYPE", coretype, 1);
  ::unsetenv("OPENBLAS_CORETYPE");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::fflush(stdout);
  std::fflush(stderr);
  ::execv("/proc/self/exe", argv.data());
  throw Error(
      fmt::format("freight bench: cannot restart without OPENBLAS_CORETYPE ({}); unset "
                  "it, or pass --keep-openblas-coretype",
                  std::strerror(errno)));
}

std::string blas_kernels(const std::string& build) {
  size_t k = build.find("(kernels: ");
  if (k == std::string::npos) return "";
  size_t e = build.find_first_of(",)", k);
  return build.substr(k + 10, e - k - 10);
}

json describe_device(const DeviceInfo& d, const std::string& build) {
  json j{{"device", d.device.str()}, {"name", d.name}, {"memory_bytes", d.memory_total}};
  if (d.device.is_cpu()) {
    std::string kernels = blas_kernels(build);
    j["hardware_threads"] = d.compute_units;
    j["blas"] = build;
    j["description"] =
        fmt::format("{}, {} hardware threads, {} memory; OpenBLAS kernels {}", d.name,
                    d.compute_units, bench::format_bytes(double(d.memory_total)), kernels);
  } else {
    j["multiprocessors"] = d.compute_units;
    j["compute_capability"] = d.compute_capability;
    j["driver"] = d.driver_version;
    j["runtime"] = d.runtime_version;
    j["description"] = fmt::format(
        "{}, {} memory, {} multiprocessors, compute capability {}, driver {}, runtime {}{}", d.name,
        bench::format_bytes(double(d.memory_total)), d.compute_units, d.compute_capability,
        d.driver_version, d.runtime_version, d.details.empty() ? "" : "; " + d.details);
  }
  return j;
}

// The measured fp32 peak of a device with the current CPU thread count (freight::peaks_for: from
// the peaks cache when this device and build were measured before, else measured now), as a
// record for the report.
json device_peak(Device device, bool remeasure) {
  DevicePeaks p = remeasure ? measure_peaks(device) : peaks_for(device);
  json j{{"device", device.str()},
         {"threads", device.is_cpu() ? p.threads : 0},
         {"fp32_gflops", p.fp32_flops / 1e9},
         {"gemm_n", p.gemm_n},
         {"spread", p.spread},
         {"measured_at", p.measured_at},
         {"from_cache", p.from_cache}};
  if (p.tf32_flops > 0) j["tf32_gflops"] = p.tf32_flops / 1e9;
  if (p.bf16_flops > 0) j["bf16_gflops"] = p.bf16_flops / 1e9;
  return j;
}

// One PyTorch configuration: a worker process (BLAS flavour), threads, device, torch.compile.
struct TorchConfig {
  bench::JsonLinesWorker* worker;
  std::string label;  // "2 threads, openblas-openmp", "eager", "compile"
  std::string blas;   // flavour of the worker
  int threads = 0;
  std::string device = "cpu";
  bool compile = false;
};

class PyTorchSide {
 public:
  // Starts one worker per BLAS flavour found; on any failure `skipped` says why.
  PyTorchSide(const Options& o, const std::string& dir, const std::vector<int>& cpu_threads,
              const std::vector<Device>& gpus, json& info) {
    std::string script =
        o.pytorch_script.empty() ? bench::default_pytorch_script() : o.pytorch_script;
    if (script.empty() || !fs::exists(script)) {
      skipped = fmt::format("the PyTorch script '{}' is not found (--pytorch-script)", script);
      return;
    }
    const std::vector<std::string> pythons = split(o.python);
    if (pythons.empty()) {
      skipped = "--python names no Python";
      return;
    }
    bench::EnvChanges base;
    for (const auto& [k, v] : kPyTorchMallocEnv) base.emplace_back(k, v);
    base.emplace_back("OPENBLAS_CORETYPE", std::nullopt);
    if (const char* ct = std::getenv("OPENBLAS_CORETYPE")) base.back().second = ct;  // kept
    std::vector<std::pair<std::string, bench::EnvChanges>> flavours = {{"default", base}};
    for (const char* d : kOpenBlasOpenMpDirs) {
      if (!fs::exists(d)) continue;
      bench::EnvChanges env = base;
      const char* old = std::getenv("LD_LIBRARY_PATH");
      env.emplace_back("LD_LIBRARY_PATH", old && *old ? std::string(d) + ":" + old : d);
      flavours.emplace_back("openblas-openmp", env);
      break;
    }
    std::vector<std::string> failures, versions, python_versions;
    for (size_t pi = 0; pi < pythons.size(); ++pi) {
      const std::string& python = pythons[pi];
      if (::access(python.c_str(), X_OK) != 0) {
        failures.push_back(fmt::format("{} is not an executable Python (--python)", python));
        continue;
      }
      std::vector<std::string> seen_libraries;
      for (auto& [tag, env] : flavours) {
        std::string log =
            (fs::path(dir) / fmt::format("{}-pytorch{}-{}.log", o.name,
                                         pythons.size() > 1 ? std::to_string(pi + 1) : "", tag))
                .string();
        fs::remove(log);
        try {
          auto w = std::make_unique<bench::JsonLinesWorker>(
              std::vector<std::string>{python, script, "--serve"}, env, log);
          const json& g = w->greeting();
          std::string lib = g.at("blas").value("library", "unknown");
          if (std::find(seen_libraries.begin(), seen_libraries.end(), lib) != seen_libraries.end())
            continue;  // LD_LIBRARY_PATH changed nothing: the same BLAS as before
          seen_libraries.push_back(lib);
          std::string flavour = g.at("blas").value("flavour", fs::path(lib).filename().string());
          // With several PyTorches, each configuration names its version.
          if (pythons.size() > 1)
            flavour = fmt::format("torch {} {}", g.value("version", "?"), flavour);
          json wi{{"blas_flavour", flavour}, {"greeting", g}};
          wi["environment"] = json::object();
          for (const auto& [k, v] : env) wi["environment"][k] = v ? json(*v) : json("(unset)");
          info["workers"].push_back(wi);
          if (seen_libraries.size() == 1) {
            versions.push_back(g.value("version", ""));
            python_versions.push_back(g.value("python", ""));
          }
          compiles_.push_back(g.value("compile", false));
          workers_.push_back(std::move(w));
          flavours_.push_back(flavour);
        } catch (const Error& e) {
          if (seen_libraries.empty())
            failures.push_back(fmt::format("PyTorch could not start ({}): {}", python, e.what()));
          else
            notes.push_back(fmt::format("PyTorch ({}) with {} BLAS could not start: {}", python,
                                        tag, e.what()));
          if (seen_libraries.empty()) break;
        }
      }
    }
    if (workers_.empty()) {
      std::string why;
      for (const std::string& f : failures) why += (why.empty() ? "" : "; ") + f;
      skipped = why;
      return;
    }
    for (const std::string& f : failures) notes.push_back(f);
    auto join = [](const std::vector<std::string>& v) {
      std::string out;
      for (const std::string& x : v) out += (out.empty() ? "" : ", ") + x;
      return out;
    };
    info["version"] = join(versions);
    info["python"] = join(python_versions);
    // CPU configurations: every worker with 1 thread and with each Freight thread setting.
    std::vector<int> ts{1};
    for (int t : cpu_threads)
      if (std::find(ts.begin(), ts.end(), t) == ts.end()) ts.push_back(t);
    for (size_t i = 0; i < workers_.size(); ++i)
      for (int t : ts)
        cpu.push_back({workers_[i].get(),
                       fmt::format("{} thread{}, {}", t, t == 1 ? "" : "s", flavours_[i]),
                       flavours_[i], t});
    // torch.compile on the CPU (--pytorch-compile): each PyTorch that has it, its first BLAS
    // flavour, on the most threads (compiling takes tens of seconds per model and batch size).
    if (o.pytorch_compile) {
      const int most = *std::max_element(ts.begin(), ts.end());
      std::vector<std::string> compiled;
      for (size_t i = 0; i < workers_.size(); ++i) {
        const std::string version = workers_[i]->greeting().value("version", "");
        if (!compiles_[i] || std::find(compiled.begin(), compiled.end(), version) != compiled.end())
          continue;
        compiled.push_back(version);
        cpu.push_back(
            {workers_[i].get(),
             fmt::format("{} thread{}, {}, compile", most, most == 1 ? "" : "s", flavours_[i]),
             flavours_[i], most, "cpu", true});
      }
      if (compiled.empty()) notes.push_back("--pytorch-compile: no PyTorch here has torch.compile");
    }
    // GPU configurations: eager, and torch.compile when this PyTorch has it.
    // GPU rows: the first PyTorch given that can use CUDA (Debian's cannot).
    size_t cuda_worker = workers_.size();
    for (size_t i = 0; i < workers_.size() && cuda_worker == workers_.size(); ++i)
      if (workers_[i]->greeting().value("cuda", false)) cuda_worker = i;
    if (!gpus.empty()) {
      if (cuda_worker == workers_.size()) {
        notes.push_back(fmt::format("PyTorch GPU rows: {} has no usable CUDA",
                                    pythons.size() > 1 ? "no PyTorch here" : "this PyTorch"));
      } else {
        bench::JsonLinesWorker* w = workers_[cuda_worker].get();
        const std::string& flavour = flavours_[cuda_worker];
        const bool compiles = compiles_[cuda_worker];
        for (Device d : gpus) {
          gpu[d.index].push_back({w, "eager", flavour, 0, d.str()});
          if (compiles) gpu[d.index].push_back({w, "compile", flavour, 0, d.str(), true});
        }
        if (!compiles)
          notes.push_back("PyTorch GPU rows: eager only (this PyTorch has no torch.compile)");
      }
    }
    std::string flavour_list, thread_list;
    for (const std::string& f : flavours_) flavour_list += (flavour_list.empty() ? "" : ", ") + f;
    for (int t : ts) thread_list += (thread_list.empty() ? "" : ", ") + std::to_string(t);
    info["summary"] =
        fmt::format("BLAS flavours tried: {}; threads tried: {}", flavour_list, thread_list);
  }

  std::string skipped;
  std::vector<std::string> notes;
  std::vector<TorchConfig> cpu;
  std::map<int, std::vector<TorchConfig>> gpu;  // by GPU index

 private:
  std::vector<std::unique_ptr<bench::JsonLinesWorker>> workers_;
  std::vector<std::string> flavours_;
  std::vector<bool> compiles_;  // whether worker i's PyTorch has torch.compile
};

// PyTorch's answer for one configuration, with the config's description added.
json run_torch(const TorchConfig& c, const nn::ModelSpec& spec, int64_t batch, const Options& o,
               const bench::TimingOptions& t, bool latency) {
  json req{{"model", spec.path},
           {"batch_size", batch},
           {"threads", c.threads},
           {"device", c.device},
           {"compile", c.compile},
           {"precision", o.precision},
           {"seconds", t.seconds},
           {"min_rounds", t.min_rounds},
           {"warmup_seconds", t.warmup_seconds},
           {"max_step_seconds", t.max_step_seconds},
           {"latency", latency},
           {"latency_seconds", t.latency_seconds}};
  json r;
  try {
    r = c.worker->request(req);
  } catch (const Error& e) {
    r = json{{"error", e.what()}};
  }
  r["model"] = spec.name;
  r["config"] = c.label;
  r["blas_flavour"] = c.blas;
  if (r.contains("error"))
    r["status"] = "error";
  else if (r.value("skipped", false))
    r["status"] = "skipped";
  else
    r["status"] = "ok";
  return r;
}

std::string ms(double s) {
  return bench::format_sig(1e3 * s);
}

// What to run, from the options.
struct Plan {
  std::vector<nn::ModelSpec> specs;
  std::vector<int64_t> batches;
  std::vector<int> threads;  // CPU rows (empty: no CPU rows)
  std::vector<Device> gpus;
  int all_threads = 1;
  bench::TimingOptions timing;
};

Plan make_plan(const Options& o, std::vector<std::string>& notes) {
  Plan p;
  for (const std::string& m : split(!o.models.empty() ? o.models
                                    : o.quick         ? kQuickModels
                                                      : kDefaultModels))
    p.specs.push_back(nn::load_model_spec(m));
  FREIGHT_CHECK(!p.specs.empty(), "--models: no model given");
  for (const std::string& b : split(!o.batch_sizes.empty() ? o.batch_sizes
                                    : o.quick              ? "64"
                                                           : "1,64,256"))
    p.batches.push_back(parse_positive("--batch-sizes", b));
  FREIGHT_CHECK(!p.batches.empty(), "--batch-sizes: no batch size given");
  p.all_threads = int(std::max(1u, std::thread::hardware_concurrency()));
  for (const std::string& t : split(!o.threads.empty() ? o.threads : o.quick ? "all" : "1,all")) {
    int n = t == "all" ? p.all_threads : int(parse_positive("--threads", t));
    if (std::find(p.threads.begin(), p.threads.end(), n) == p.threads.end()) p.threads.push_back(n);
  }
  bool want_cpu = false;
  for (const std::string& d : split(o.devices)) {
    if (d == "cpu") {
      want_cpu = true;
      continue;
    }
    FREIGHT_CHECK(d == "cuda" || d.starts_with("cuda:"),
                  fmt::format("--devices: '{}' is not cpu, cuda or cuda:N", d));
    std::string why;
    if (!cuda_available(&why)) {  // absent GPUs are skipped with the reason, not an error
      notes.push_back(fmt::format("no GPU rows: {}", why));
      continue;
    }
    if (d == "cuda") {
      for (int i = 0; i < cuda_device_count(); ++i) p.gpus.push_back(Device::cuda(i));
    } else if (Device dev = parse_device(d); dev.index < cuda_device_count()) {
      p.gpus.push_back(dev);
    } else {
      notes.push_back(fmt::format("no rows for {}: there are {} GPUs", d, cuda_device_count()));
    }
  }
  if (!want_cpu) p.threads.clear();
  // Only GPUs asked for and none there: an error, not an empty report (absent GPUs beside the
  // CPU are a note).
  FREIGHT_CHECK(want_cpu || !p.gpus.empty(),
                fmt::format("--devices {}: nothing to time: {}", o.devices,
                            notes.empty() ? std::string("no device") : notes.back()));
  p.timing.seconds = o.seconds ? *o.seconds : o.quick ? 0.25 : 1.0;
  p.timing.warmup_seconds = o.quick ? 0.1 : 0.25;
  p.timing.latency_seconds = o.quick ? 0.1 : 0.3;
  p.timing.min_rounds = o.min_rounds;
  p.timing.max_step_seconds = o.max_step_seconds;
  return p;
}

// The rows, interleaved: per model and batch, Freight's CPU rows, PyTorch's CPU configurations,
// then per GPU Freight's row and PyTorch's. Progress goes to stderr.
class Sweep {
 public:
  Sweep(const Options& o, const Plan& plan, json& doc, std::vector<std::string>& notes,
        PyTorchSide* torch)
      : o_(o), plan_(plan), doc_(doc), notes_(notes), torch_(torch) {
    total_ = plan.specs.size() * plan.batches.size() * (plan.threads.size() + plan.gpus.size());
  }

  json run() {
    // The CPU peaks of every thread count first: measuring them (no cache yet, or
    // --remeasure-peaks) also measures and applies the thread split
    // (freight/parallel_thresholds.h), which every row must run with, the first one too.
    for (int t : plan_.threads) peak_flops(Device::cpu(), t);
    set_num_threads(plan_.all_threads);
    for (const nn::ModelSpec& spec : plan_.specs) {
      for (int64_t batch : plan_.batches) {
        std::vector<size_t> cpu_rows;
        for (int t : plan_.threads) cpu_rows.push_back(freight_row(spec, batch, Device::cpu(), t));
        if (torch_ && !cpu_rows.empty()) {
          std::vector<json> results = torch_runs(spec, batch, torch_->cpu);
          for (size_t i : cpu_rows) {  // each Freight row against PyTorch with as many threads
            int t = rows_[i]["threads"].get<int>();
            std::vector<json> eligible;
            for (size_t k = 0; k < torch_->cpu.size(); ++k)
              if (torch_->cpu[k].threads <= t) eligible.push_back(results[k]);
            attach_torch(rows_[i], eligible);
          }
        }
        for (Device g : plan_.gpus) {
          size_t i = freight_row(spec, batch, g, plan_.all_threads);
          if (torch_ && torch_->gpu.count(g.index))
            attach_torch(rows_[i], torch_runs(spec, batch, torch_->gpu[g.index]));
          gpu_speedup(rows_[i], cpu_rows);
        }
      }
    }
    return rows_;
  }

 private:
  size_t freight_row(const nn::ModelSpec& spec, int64_t batch, Device dev, int threads) {
    const json& dj = device_json(dev);
    json r{{"framework", "freight"},
           {"version", FREIGHT_VERSION},
           {"model", spec.name},
           {"batch_size", batch},
           {"precision", o_.precision},
           {"optimizer", "SGD, momentum 0.9, lr 0.01"},
           {"device", dev.str()},
           {"device_name", dj.value("name", "")},
           {"device_description", dj.value("description", "")},
           {"threads", threads},
           {"load_1min", load_average()[0]}};
    fmt::print(stderr, "[{:>2}/{}] {} batch {} {}: ", ++done_, total_, spec.name, batch,
               dev.is_cpu() ? fmt::format("cpu {}t", threads) : dev.str());
    std::fflush(stderr);
    std::string key = fmt::format("{}/{}/{}", spec.name, dev.str(), threads);
    try {
      set_num_threads(threads);
      r["build"] = build_info();
      // Whether the threads shared a cache at the row's start and end (freight/peaks.h): a
      // virtual machine's host can move its vCPUs apart and back between rows and within one.
      bench::FreightMeasurement m;
      const json sharing = with_cache_readings(dev.is_cpu(), [&](const bench::ReadNow& read_now) {
        bench::TimingOptions timing = plan_.timing;
        timing.between_rounds = read_now;  // the host can move the vCPUs within a row
        m = bench::measure_freight(spec, batch, dev, threads, timing, !freight_latency_.count(key));
      });
      if (!sharing.is_null()) r["cache_sharing"] = sharing;
      r["first_step_ms"] = 1e3 * m.step.first_step_s;
      if (m.step.skipped) {
        r["status"] = "skipped";
        r["reason"] = m.step.reason;
        fmt::print(stderr, "skipped: {}\n", m.step.reason);
      } else {
        double t = m.step.median_s, flops = m.step_flops;
        r.update({{"status", "ok"},
                  {"median_ms", 1e3 * t},
                  {"min_ms", 1e3 * m.step.min_s},
                  {"max_ms", 1e3 * m.step.max_s},
                  {"rounds", m.step.rounds},
                  {"steps_per_round", m.step.steps_per_round},
                  {"warmup_steps", m.step.warmup_steps},
                  {"samples_per_s", double(batch) / t},
                  {"forward_flops", m.forward_flops},
                  {"step_flops", flops},
                  {"gflops", flops / t / 1e9},
                  {"peak_memory_bytes", m.peak_memory}});
        if (m.has_latency)
          freight_latency_[key] = {{"latency_ms", 1e3 * m.latency.median_s},
                                   {"latency_min_ms", 1e3 * m.latency.min_s},
                                   {"latency_calls", m.latency.calls}};
        if (freight_latency_.count(key)) r.update(freight_latency_[key]);
        double peak = peak_flops(dev, threads);
        if (peak > 0) {
          r["peak_gflops"] = peak / 1e9;
          r["fraction_of_peak"] = flops / t / peak;
        }
        fmt::print(stderr, "{} ms/step ({}-{}), {} samples/s{}\n", ms(t), ms(m.step.min_s),
                   ms(m.step.max_s), bench::format_sig(double(batch) / t),
                   r.contains("latency_ms")
                       ? fmt::format(", batch-1 latency {} ms",
                                     bench::format_sig(r["latency_ms"].get<double>()))
                       : "");
      }
    } catch (const Error& e) {
      r.update({{"status", "error"}, {"reason", e.what()}});
      fmt::print(stderr, "error: {}\n", e.what());
    } catch (const std::bad_alloc&) {
      r.update({{"status", "error"}, {"reason", "out of memory"}});
      fmt::print(stderr, "error: out of memory\n");
    }
    set_num_threads(plan_.all_threads);
    rows_.push_back(r);
    return rows_.size() - 1;
  }

  // Runs one row's measurement `run` with the cache-sharing readings when `read` (a CPU row on
  // two threads or more; bench/cache_reruns.h), again while they said apart (--rerun-apart).
  // Returns the kept run's readings ("start", "end", and the "lowest" of all, between the timed
  // rounds too: freight::CacheSharing::ratio) and the runs; null when nothing was read.
  json with_cache_readings(bool read, const std::function<void(const bench::ReadNow&)>& run) {
    bench::RerunOptions o;
    o.reruns = o_.rerun_apart;
    int runs = 0;
    const bench::SharedRun sr = bench::run_with_shared_caches(
        o,
        [&](const bench::ReadNow& read_now) {
          if (runs++ > 0) {  // on the row's progress line
            fmt::print(stderr, "caches apart, again: ");
            std::fflush(stderr);
          }
          run(read_now);
        },
        read ? std::function<CacheSharing()>() : [] { return CacheSharing(); });
    if (!sr.end.measured) return json();
    return {{"start", sr.start.ratio()},
            {"end", sr.end.ratio()},
            {"lowest", sr.lowest},
            {"runs", sr.runs}};
  }

  const json& device_json(Device dev) const {
    for (const json& d : doc_["devices"])
      if (d.value("device", "") == dev.str()) return d;
    static const json none = json::object();
    return none;
  }

  // The fp32 peak of `dev` with `threads` CPU threads, once per setting (0 when unknown).
  double peak_flops(Device dev, int threads) {
    std::string key = fmt::format("{}/{}", dev.str(), threads);
    if (!peaks_.count(key)) {
      try {
        set_num_threads(threads);
        peaks_[key] = device_peak(dev, o_.remeasure_peaks);
        doc_["peaks"].push_back(peaks_[key]);
      } catch (const Error& e) {
        peaks_[key] = json::object();
        notes_.push_back(fmt::format("no peak for {}: {}", key, e.what()));
      }
    }
    return peaks_[key].value("fp32_gflops", 0.0) * 1e9;
  }

  std::vector<json> torch_runs(const nn::ModelSpec& spec, int64_t batch,
                               const std::vector<TorchConfig>& configs) {
    std::vector<json> out;
    for (const TorchConfig& c : configs) {
      std::string key = spec.name + "/" + c.label;
      fmt::print(stderr, "        pytorch {}: ", c.label);
      std::fflush(stderr);
      // PyTorch's rows on two threads or more get the same readings and reruns as Freight's
      // (its rounds run in the worker: nothing is read between them).
      json p;
      const json sharing =
          with_cache_readings(c.device == "cpu" && c.threads >= 2, [&](const bench::ReadNow&) {
            p = run_torch(c, spec, batch, o_, plan_.timing, !torch_latency_.count(key));
          });
      if (!sharing.is_null()) p["cache_sharing"] = sharing;
      if (p.contains("latency_ms")) torch_latency_[key] = p["latency_ms"].get<double>();
      if (p["status"] == "ok")
        fmt::print(
            stderr, "{} ms/step ({}-{}){}\n", bench::format_sig(p["median_ms"].get<double>()),
            bench::format_sig(p["min_ms"].get<double>()),
            bench::format_sig(p["max_ms"].get<double>()),
            p.contains("latency_ms") ? fmt::format(", batch-1 latency {} ms",
                                                   bench::format_sig(p["latency_ms"].get<double>()))
                                     : "");
      else
        fmt::print(stderr, "{}: {}\n", p["status"].get<std::string>(),
                   p.value("reason", p.value("error", "")));
      out.push_back(p);
    }
    return out;
  }

  // PyTorch's fastest of `results` (the configurations eligible for `row`) and the ratios; its
  // latency is the best of theirs.
  void attach_torch(json& row, const std::vector<json>& results) {
    json best, tried = json::array();
    double best_latency = 0;
    for (const json& p : results) {
      tried.push_back({{"config", p.value("config", "")},
                       {"status", p.value("status", "")},
                       {"median_ms", p.contains("median_ms") ? p["median_ms"] : json()}});
      if (p.value("status", "") == "ok" &&
          (best.is_null() || p["median_ms"].get<double>() < best["median_ms"].get<double>()))
        best = p;
      auto l = torch_latency_.find(row.value("model", "") + "/" + p.value("config", ""));
      if (l != torch_latency_.end() && (best_latency == 0 || l->second < best_latency))
        best_latency = l->second;
    }
    json pt{{"tried", tried}};
    if (best.is_null()) {
      pt["status"] = results.empty() ? "not run" : results.front().value("status", "error");
      if (!results.empty())
        pt["reason"] = results.front().value("reason", results.front().value("error", ""));
    } else {
      pt["status"] = "ok";
      for (const char* k : {"config", "blas_flavour", "threads", "blas_threads", "compile",
                            "version", "median_ms", "min_ms", "max_ms", "rounds", "steps_per_round",
                            "warmup_steps", "peak_memory_bytes", "cache_sharing"})
        if (best.contains(k)) pt[k] = best[k];
      double p = best["median_ms"].get<double>();
      pt["samples_per_s"] = row["batch_size"].get<double>() / p * 1e3;
      if (best_latency > 0) pt["latency_ms"] = best_latency;
      if (row.value("status", "") == "ok") {
        double f = row["median_ms"].get<double>();
        pt["freight_over_pytorch"] = f / p;
        pt["speedup"] = p / f;
      }
    }
    row["pytorch"] = pt;
  }

  // GPU over CPU: against the CPU row with the most threads, same model and batch.
  void gpu_speedup(json& gpu_row, const std::vector<size_t>& cpu_rows) const {
    const json* cpu = nullptr;
    for (size_t c : cpu_rows)
      if (rows_[c]["status"] == "ok" &&
          (!cpu || rows_[c]["threads"].get<int>() > (*cpu)["threads"].get<int>()))
        cpu = &rows_[c];
    if (!cpu || gpu_row["status"] != "ok") return;
    gpu_row["gpu_speedup_over_cpu"] =
        (*cpu)["median_ms"].get<double>() / gpu_row["median_ms"].get<double>();
    gpu_row["cpu_threads_for_speedup"] = (*cpu)["threads"];
  }

  const Options& o_;
  const Plan& plan_;
  json& doc_;
  std::vector<std::string>& notes_;
  PyTorchSide* torch_;
  json rows_ = json::array();
  size_t total_ = 0, done_ = 0;
  std::map<std::string, json> peaks_;            // "cpu/2" -> device_peak()
  std::map<std::string, json> freight_latency_;  // "model/device/threads" -> latency fields
  std::map<std::string, double> torch_latency_;  // "model/config" -> ms
};

}  // namespace

void add_bench(CLI::App& app) {
  auto o = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "bench",
      "Time training steps of zoo models on the CPU (1 and all threads) and each GPU, optionally "
      "beside PyTorch; Markdown, JSON and plots");
  cmd->add_option("--models", o->models,
                  fmt::format("Comma-separated models (default: {})", kDefaultModels))
      ->check(non_empty_list());
  cmd->add_option("--batch-sizes", o->batch_sizes,
                  "Comma-separated batch sizes (default: 1,64,256)")
      ->check(list_in_range(limits::batch_size));
  cmd->add_option("--devices", o->devices,
                  "cpu and/or cuda (every GPU) or cuda:N; GPUs that are absent are skipped")
      ->capture_default_str();
  cmd->add_option("--threads", o->threads, "CPU thread counts, numbers or 'all' (default: 1,all)")
      ->check(list_in_range(limits::threads_given, "all"));
  cmd->add_option("--precision", o->precision, "fp32")->capture_default_str();
  cmd->add_option("--out", o->out, "Directory for the report, JSON and plots")
      ->capture_default_str();
  cmd->add_option("--name", o->name, "File stem: <out>/<name>.md, .json, -speedup.png, ...")
      ->capture_default_str();
  cmd->add_option("--vs", o->vs, "pytorch: time the same models in PyTorch in the same run");
  cmd->add_flag(
      "--quick", o->quick,
      fmt::format("A reduced run: {} at batch 64, all threads, shorter timing", kQuickModels));
  cmd->add_option_function<double>(
         "--seconds", [o](const double& v) { o->seconds = v; },
         "Timed steps per row, about (default 1, quick 0.25)")
      ->check(in_range(RealRange{0, limits::kInf, true}));
  // Rounds give the median its spread; a million is a generous cap against a typo.
  cmd->add_option("--min-rounds", o->min_rounds, "Rounds per row at least")
      ->capture_default_str()
      ->check(in_range(IntRange{1, 1'000'000}));
  cmd->add_option("--max-step-seconds", o->max_step_seconds,
                  "Skip rows whose first step takes longer (0: never)")
      ->capture_default_str()
      ->check(in_range(RealRange{0, limits::kInf}));
  cmd->add_option("--python", o->python,
                  "Python with torch for --vs pytorch; several, comma-separated, to compare "
                  "each PyTorch (e.g. Debian's and one from PyPI) in the same run")
      ->capture_default_str();
  cmd->add_flag("--pytorch-compile", o->pytorch_compile,
                "With --vs pytorch, also time torch.compile'd models on the CPU (on all threads; "
                "compiling adds tens of seconds per model and batch size)");
  cmd->add_option("--pytorch-script", o->pytorch_script,
                  "bench/pytorch/step_bench.py (default: the source tree's)");
  cmd->add_flag("--keep-openblas-coretype", o->keep_coretype,
                "Keep OPENBLAS_CORETYPE (default: removed for Freight and PyTorch)");
  cmd->add_option("--nproc", o->nproc,
                  "Comma-separated rank counts (e.g. 1,2): also train each model on that many "
                  "processes of this host (mpirun) and report steps/s against one process and "
                  "freight plan's prediction")
      ->check(list_in_range(limits::nproc));
  cmd->add_option("--rerun-apart", o->rerun_apart,
                  "Rerun a CPU row on two threads or more, Freight's or PyTorch's, up to N more "
                  "times while the threads did not share a cache at its start or end, or between "
                  "Freight's timed rounds (a virtual machine's host moving its vCPUs; see freight "
                  "devices), waiting up to " +
                      fmt::format("{:g}", bench::RerunOptions().wait_seconds) +
                      " s for a shared reading before each rerun; the row keeps its last run")
      ->capture_default_str()
      ->check(in_range(IntRange{0, 100}));
  cmd->add_flag("--no-plots", o->no_plots, "Do not run gnuplot");
  cmd->add_flag("--remeasure-peaks", o->remeasure_peaks,
                "Measure the devices' peaks now instead of using the peaks cache");
  cmd->callback([o] {
    if (!o->keep_coretype) restart_without_coretype();
    std::signal(SIGPIPE, SIG_IGN);  // a worker that died is reported, not fatal
    FREIGHT_CHECK(o->precision == "fp32",
                  fmt::format("--precision {}: only fp32 is implemented", o->precision));
    FREIGHT_CHECK(o->vs.empty() || o->vs == "pytorch",
                  fmt::format("--vs {}: the only framework to compare with is pytorch", o->vs));
    FREIGHT_CHECK(!o->pytorch_compile || o->vs == "pytorch",
                  "--pytorch-compile times PyTorch's compiled models: it needs --vs pytorch");
    FREIGHT_CHECK(o->min_rounds >= 1, "--min-rounds must be at least 1");
    FREIGHT_CHECK(o->no_plots || bench::gnuplot_can_name(o->name),
                  fmt::format("--name: '{}' holds a control character (a newline, a tab, ...), "
                              "which the plots' gnuplot scripts cannot name; choose another",
                              o->name));
    std::vector<std::string> notes;
    if (const char* removed = std::getenv("FREIGHT_BENCH_REMOVED_CORETYPE")) {
      notes.push_back(fmt::format(
          "OPENBLAS_CORETYPE={} was set; freight bench restarted itself without it, and runs "
          "PyTorch without it, so that OpenBLAS picks the kernels for this CPU",
          removed));
      ::unsetenv("FREIGHT_BENCH_REMOVED_CORETYPE");
    } else if (const char* ct = std::getenv("OPENBLAS_CORETYPE")) {
      notes.push_back(
          fmt::format("OPENBLAS_CORETYPE={} kept (--keep-openblas-coretype), for "
                      "Freight and PyTorch alike",
                      ct));
    }

    Plan plan = make_plan(*o, notes);
    std::error_code mkdir_error;
    fs::create_directories(o->out, mkdir_error);
    FREIGHT_CHECK(!mkdir_error, fmt::format("--out {}: cannot create the directory: {}", o->out,
                                            mkdir_error.message()));
    int previous_threads = num_threads();
    set_num_threads(plan.all_threads);
    std::string build_all = build_info();

    json doc;
    doc["schema"] = "freight-bench-1";
    doc["freight"] = {{"version", FREIGHT_VERSION}, {"build", build_all}};
    doc["started_at"] = utc_now();
    doc["load_average"]["start"] = load_average();
    const bench::TimingOptions& timing = plan.timing;
    doc["settings"] = {{"models", json::array()},
                       {"batch_sizes", plan.batches},
                       {"threads", plan.threads},
                       {"devices", json::array()},
                       {"precision", o->precision},
                       {"optimizer", "SGD, momentum 0.9, lr 0.01"},
                       {"seconds", timing.seconds},
                       {"min_rounds", timing.min_rounds},
                       {"warmup_seconds", timing.warmup_seconds},
                       {"latency_seconds", timing.latency_seconds},
                       {"max_step_seconds", timing.max_step_seconds},
                       {"quick", o->quick},
                       {"rerun_apart", o->rerun_apart},
                       {"vs", o->vs}};
    for (const auto& s : plan.specs) doc["settings"]["models"].push_back(s.name);
    doc["devices"] = json::array();
    doc["peaks"] = json::array();
    for (const DeviceInfo& d : list_devices()) {
      bool gpu_used = std::find(plan.gpus.begin(), plan.gpus.end(), d.device) != plan.gpus.end();
      if (d.device.is_cuda() && !gpu_used) continue;
      doc["devices"].push_back(describe_device(d, build_all));
      if (gpu_used || (d.device.is_cpu() && !plan.threads.empty()))
        doc["settings"]["devices"].push_back(d.device.str());
    }
    doc["flops_convention"] = kFlopsConvention;

    std::unique_ptr<PyTorchSide> torch;
    if (o->vs == "pytorch") {
      json info = {{"workers", json::array()}};
      torch = std::make_unique<PyTorchSide>(*o, o->out, plan.threads, plan.gpus, info);
      json env = json::object();
      for (const auto& [k, v] : kPyTorchMallocEnv) env[k] = v;
      info["malloc_environment"] = env;
      if (!torch->skipped.empty()) {
        info["skipped"] = torch->skipped;
        notes.push_back("PyTorch not run: " + torch->skipped);
        torch.reset();
      } else {
        for (const std::string& n : torch->notes) notes.push_back(n);
        notes.push_back(fmt::format(
            "PyTorch ran with MALLOC_TRIM_THRESHOLD_={} and MALLOC_MMAP_THRESHOLD_={} (glibc "
            "never trims its heap nor mmaps blocks under 4 GiB, so freed tensors are reused "
            "like Freight's cache reuses them), OPENBLAS_CORETYPE unset, GOMP_SPINCOUNT={} "
            "(inherited from the freight command, as Freight runs), and for each row the "
            "fastest of its configurations: each PyTorch given to --python, "
            "torch.set_num_threads (with openblas_set_num_threads) in 1 and the row's thread "
            "count, BLAS flavours its default and, where it loads the system's OpenBLAS, "
            "LD_LIBRARY_PATH=<multiarch>/openblas-openmp, and with --pytorch-compile "
            "torch.compile on all threads; a Freight row is compared with PyTorch using at "
            "most as many threads",
            kPyTorchMallocEnv[0].second, kPyTorchMallocEnv[1].second,
            std::getenv("GOMP_SPINCOUNT") ? std::getenv("GOMP_SPINCOUNT") : "libgomp's default"));
      }
      doc["pytorch"] = info;
    }
    notes.push_back(std::string(kFlopsConvention) + ".");
    notes.push_back(
        "samples/s = batch size / median step time (for lstm-ptb a sample is a "
        "sequence of 32 tokens); peak memory is the high-water mark of Freight's "
        "allocator on the device during the row (parameters, data, gradients, "
        "optimizer state, activations); PyTorch's is, on a GPU, torch.cuda.max_memory_allocated, "
        "and on the CPU the growth of its worker's resident set during the row (the high-water "
        "mark minus the resident set before it, after freeing what earlier rows left), which "
        "also counts what its allocator and libraries keep beside the tensors");

    doc["rows"] = Sweep(*o, plan, doc, notes, torch.get()).run();
    torch.reset();  // ends the workers
    set_num_threads(previous_threads);
    if (!o->nproc.empty()) {
      RanksBenchOptions ro;
      for (const std::string& n : split(o->nproc))
        ro.nproc.push_back(int(parse_positive("--nproc", n)));
      ro.seconds = 2 * plan.timing.seconds;  // an epoch: 0.5 s quick, 2 s by default
      ro.log_dir = o->out;
      ro.name = o->name;
      doc["ranks"] = bench_ranks(plan.specs, plan.batches, ro);
    }
    doc["finished_at"] = utc_now();
    doc["load_average"]["end"] = load_average();

    // ---- output ----
    std::vector<std::string> images;
    if (!o->no_plots) images = bench::write_plots(doc, o->out, o->name, notes);
    if (!images.empty())
      notes.push_back("plots: " + [&] {
        std::string s;
        for (size_t i = 0; i < images.size(); ++i) s += (i ? ", " : "") + images[i];
        return s;
      }());
    doc["notes"] = notes;
    std::string md = bench::markdown_report(doc);
    if (doc.contains("ranks")) md += ranks_markdown(doc["ranks"]);
    {
      std::ofstream f(fs::path(o->out) / (o->name + ".json"));
      f << doc.dump(2) << "\n";
      std::ofstream m(fs::path(o->out) / (o->name + ".md"));
      m << md;
    }
    fmt::print("{}", md);
    fmt::print(stderr, "wrote {}/{}.md, {}.json{}\n", o->out, o->name, o->name,
               images.empty() ? "" : " and the plots");
  });
}

}  // namespace freight::cli
