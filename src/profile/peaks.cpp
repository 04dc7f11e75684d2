// measure_peaks / peaks_for: the device-specific measurements (core/hardware_peaks.h), the
// framework's per-op costs measured through the public API on any device, and the JSON cache.
#include "freight/peaks.h"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/backend.h"
#include "freight/autograd.h"
#include "freight/error.h"
#include "freight/ops.h"
#include "freight/runtime.h"
#include "io/atomic_file.h"
#include "profile/peaks_device.h"

namespace freight {

namespace {
namespace fs = std::filesystem;
using nlohmann::json;

std::string device_name(Device d) {
  if (d.is_cpu()) return list_devices().front().name;
  return backend_for(DeviceType::CUDA).info(d.index).name;
}

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// The device-specific figures (core/hardware_peaks.h) into their fields of DevicePeaks.
void copy_hardware_peaks(const HardwarePeaks& hw, DevicePeaks& p) {
  p.threads = hw.threads;
  p.fp32_flops = hw.fp32_flops;
  p.tf32_flops = hw.tf32_flops;
  p.bf16_flops = hw.bf16_flops;
  p.gemm_n = hw.gemm_n;
  p.gemm_overhead_s = hw.gemm_overhead_s;
  p.spread = hw.spread;
  p.mem_bandwidth = hw.mem_bandwidth;
  p.levels.clear();
  for (const HardwarePeaks::Level& l : hw.levels) p.levels.push_back({l.bytes, l.bandwidth});
  p.h2d_pinned = hw.h2d_pinned;
  p.h2d_pageable = hw.h2d_pageable;
  p.d2h_pinned = hw.d2h_pinned;
  p.d2h_pageable = hw.d2h_pageable;
  p.launch_s = hw.launch_s;
}

// Seconds per op of a chain of tiny (one-element) ops through the public API, queued back to
// back and waited for at the end: what an op costs when its arithmetic is nothing.
double tiny_op_seconds(Device d) {
  Tensor x = Tensor::ones({1}, DType::F32, d);
  constexpr int kOps = 2000;
  return profile::median_seconds(d.is_cpu(), 9,
                                 [&] {
                                   Tensor y = x;
                                   for (int i = 0; i < kOps; ++i) y = add_scalar(y, 1e-3);
                                   synchronize(d);
                                 }) /
         kOps;
}

// The same with autograd: each op recorded on the tape, then one backward through the chain,
// so the figure is forward op + node + backward rule + gradient delivery, per op.
double tiny_train_op_seconds(Device d) {
  Tensor w = Tensor::ones({1}, DType::F32, d);
  w.set_requires_grad(true);
  constexpr int kOps = 500;
  return profile::median_seconds(d.is_cpu(), 9,
                                 [&] {
                                   Tensor y = w;
                                   for (int i = 0; i < kOps; ++i) y = add_scalar(y, 1e-3);
                                   y.backward(Tensor::ones({1}, DType::F32, d));
                                   w.zero_grad();
                                   synchronize(d);
                                 }) /
         kOps;
}

json to_json(const DevicePeaks& p) {
  json levels = json::array();
  for (const DevicePeaks::Level& l : p.levels)
    levels.push_back({{"bytes", l.bytes}, {"bandwidth", l.bandwidth}});
  json eff = json::object();
  for (const auto& [type, e] : p.efficiency) eff[type] = e;
  json j{{"levels", levels},
         {"efficiency", eff},
         {"device", p.device.str()},
         {"name", p.name},
         {"build", p.build},
         {"measured_at", p.measured_at},
         {"threads", p.threads},
         {"fp32_flops", p.fp32_flops},
         {"gemm_n", p.gemm_n},
         {"tf32_flops", p.tf32_flops},
         {"bf16_flops", p.bf16_flops},
         {"gemm_overhead_s", p.gemm_overhead_s},
         {"mem_bandwidth", p.mem_bandwidth},
         {"h2d_pinned", p.h2d_pinned},
         {"h2d_pageable", p.h2d_pageable},
         {"d2h_pinned", p.d2h_pinned},
         {"d2h_pageable", p.d2h_pageable},
         {"launch_s", p.launch_s},
         {"op_s", p.op_s},
         {"train_op_s", p.train_op_s},
         {"spread", p.spread},
         {"load", p.load}};
  if (p.parallel_measured)
    j["parallel"] = {{"conv_macs_per_thread", p.parallel.conv_macs_per_thread},
                     {"gemm_macs_per_thread", p.parallel.gemm_macs_per_thread},
                     {"elementwise_per_thread", p.parallel.elementwise_per_thread},
                     {"contended", p.parallel_contended},
                     {"measured_at", p.parallel_measured_at}};
  return j;
}

DevicePeaks from_json(const json& j, const std::string& key) {
  DevicePeaks p;
  p.key = key;
  p.device = parse_device(j.at("device").get<std::string>());
  p.name = j.at("name").get<std::string>();
  p.build = j.at("build").get<std::string>();
  p.measured_at = j.value("measured_at", "");
  p.threads = j.value("threads", 0);
  p.fp32_flops = j.at("fp32_flops").get<double>();
  p.gemm_n = j.value("gemm_n", int64_t(0));
  p.tf32_flops = j.value("tf32_flops", 0.0);
  p.bf16_flops = j.value("bf16_flops", 0.0);
  p.gemm_overhead_s = j.value("gemm_overhead_s", 0.0);
  p.mem_bandwidth = j.at("mem_bandwidth").get<double>();
  if (j.contains("efficiency"))
    for (const auto& [type, e] : j.at("efficiency").items()) p.efficiency[type] = e.get<double>();
  if (j.contains("levels"))
    for (const json& l : j.at("levels"))
      p.levels.push_back({l.at("bytes").get<double>(), l.at("bandwidth").get<double>()});
  p.h2d_pinned = j.value("h2d_pinned", 0.0);
  p.h2d_pageable = j.value("h2d_pageable", 0.0);
  p.d2h_pinned = j.value("d2h_pinned", 0.0);
  p.d2h_pageable = j.value("d2h_pageable", 0.0);
  p.launch_s = j.at("launch_s").get<double>();
  p.op_s = j.at("op_s").get<double>();
  p.train_op_s = j.value("train_op_s", 0.0);
  p.spread = j.value("spread", 0.0);
  p.load = j.value("load", 0.0);
  if (j.contains("parallel")) {
    const json& t = j.at("parallel");
    p.parallel.conv_macs_per_thread = t.at("conv_macs_per_thread").get<double>();
    p.parallel.gemm_macs_per_thread = t.at("gemm_macs_per_thread").get<double>();
    p.parallel.elementwise_per_thread = t.at("elementwise_per_thread").get<int64_t>();
    p.parallel_measured = true;
    p.parallel_contended = t.value("contended", false);
    p.parallel_measured_at = t.value("measured_at", std::string());
    if (p.parallel_measured_at.empty()) p.parallel_measured_at = p.measured_at;
  }
  return p;
}

json read_cache(const std::string& path) {
  std::ifstream f(path);
  if (!f) return json::object();
  try {
    json j = json::parse(f);
    if (!j.is_object()) throw Error("not a JSON object");
    return j;
  } catch (const std::exception& e) {
    throw Error(
        fmt::format("peaks cache '{}' is unreadable ({}); delete it or run `freight "
                    "devices --measure` to write it again",
                    path, e.what()));
  }
}
}  // namespace

double DevicePeaks::efficiency_for(const std::string& type) const {
  auto it = efficiency.find(type);
  // A class a cache from before it was measured lacks ("Conv2d:3x3") takes its type's figure.
  if (it == efficiency.end() && type.find(':') != std::string::npos)
    it = efficiency.find(type.substr(0, type.find(':')));
  return it == efficiency.end() ? 1.0 : it->second;
}

double DevicePeaks::bandwidth_for(double working_set) const {
  if (working_set > 0)
    for (const Level& l : levels)
      if (working_set <= l.bytes) return l.bandwidth;
  return mem_bandwidth;
}

double DevicePeaks::roof(double intensity, double working_set) const {
  return std::min(fp32_flops, intensity * bandwidth_for(working_set));
}

std::string peaks_cache_path() {
  if (const char* f = std::getenv("FREIGHT_PEAKS_FILE"); f && *f) return f;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x)
    return (fs::path(x) / "freight" / "peaks.json").string();
  if (const char* h = std::getenv("HOME"); h && *h)
    return (fs::path(h) / ".cache" / "freight" / "peaks.json").string();
  return (fs::temp_directory_path() / "freight-peaks.json").string();
}

std::string peaks_key(Device device) {
  return fmt::format("{} | {} | {}", device.str(), device_name(device), build_info());
}

void save_peaks(const DevicePeaks& p, const std::string& path) {
  json all = read_cache(path);
  if (!all.contains("entries") || !all["entries"].is_object()) all["entries"] = json::object();
  all["format"] = "freight-peaks-1";
  all["entries"][p.key] = to_json(p);
  fs::path dir = fs::path(path).parent_path();
  std::error_code ec;
  if (!dir.empty()) fs::create_directories(dir, ec);
  // Written next to the target and renamed, so a reader never sees half a file; through a
  // fresh temporary that is never a planted link (io/atomic_file.h).
  io::write_file_atomically(path, all.dump(2) + "\n", "peaks cache");
}

bool load_peaks(const std::string& key, const std::string& path, DevicePeaks& out) {
  json all = read_cache(path);
  if (!all.contains("entries") || !all["entries"].contains(key)) return false;
  try {
    out = from_json(all["entries"][key], key);
  } catch (const json::exception& e) {
    throw Error(
        fmt::format("peaks cache '{}': the entry '{}' is malformed ({}); run `freight "
                    "devices --measure` to replace it",
                    path, key, e.what()));
  }
  out.from_cache = true;
  return true;
}

namespace {
// The cached entry under `key`, if there is a readable one: a corrupt cache only means there is
// nothing to keep.
bool load_earlier(const std::string& key, DevicePeaks& out) {
  try {
    return load_peaks(key, peaks_cache_path(), out);
  } catch (const Error&) {
    return false;
  }
}
}  // namespace

DevicePeaks measure_peaks(Device device) {
  if (device.is_cuda()) {
    std::string why;
    FREIGHT_CHECK(cuda_available(&why) && device.index < cuda_device_count(),
                  fmt::format("measuring peaks of {}: no such GPU ({})", device.str(),
                              why.empty() ? fmt::format("{} visible", cuda_device_count()) : why));
  }
  DevicePeaks p;
  p.device = device;
  std::ifstream("/proc/loadavg") >> p.load;
  p.name = device_name(device);
  p.build = build_info();
  p.key = peaks_key(device);
  HardwarePeaks hw;
  kernels::measure_hardware_peaks(device.type, device.index, hw);
  copy_hardware_peaks(hw, p);
  {
    NoGradGuard no_grad;
    p.op_s = tiny_op_seconds(device);
  }
  p.train_op_s = tiny_train_op_seconds(device);
  if (device.is_cpu()) {
    p.launch_s = p.op_s;
    // Before the efficiencies, which are then measured with the thread split in force. On one
    // thread there is nothing to split: the thresholds in force stay. A measurement that never
    // saw the cores free is a neighbour's: the cached entry's thresholds are kept when they were
    // measured with the cores free, else those in force stay.
    if (num_threads() >= 2) {
      p.parallel = profile::measure_parallel_thresholds(p.parallel_contended);
      p.parallel_measured = true;
      DevicePeaks before;
      if (p.parallel_contended && load_earlier(p.key, before) && before.parallel_measured &&
          !before.parallel_contended) {
        p.parallel = before.parallel;
        p.parallel_contended = false;
        p.parallel_measured_at = before.parallel_measured_at;
      }
      if (!p.parallel_contended) set_parallel_thresholds(p.parallel);
    }
  }
  profile::measure_efficiency(device, p);
  p.measured_at = utc_now();
  if (p.parallel_measured && p.parallel_measured_at.empty()) p.parallel_measured_at = p.measured_at;
  try {
    save_peaks(p, peaks_cache_path());
  } catch (const Error&) {
    // An unwritable cache costs a later re-measurement, nothing more.
  }
  return p;
}

bool use_cached_parallel_thresholds() {
  DevicePeaks p;
  if (!load_peaks(peaks_key(Device::cpu()), peaks_cache_path(), p) || !p.parallel_measured ||
      p.parallel_contended)
    return false;
  set_parallel_thresholds(p.parallel);
  return true;
}

DevicePeaks peaks_for(Device device) {
  DevicePeaks p;
  if (load_peaks(peaks_key(device), peaks_cache_path(), p)) return p;
  return measure_peaks(device);
}

}  // namespace freight
