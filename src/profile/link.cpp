// LinkPeaks (freight/plan.h): the all-reduce time model of data parallelism, and its cache entry.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "freight/error.h"
#include "freight/plan.h"
#include "io/atomic_file.h"

namespace freight {

namespace {
using nlohmann::json;

json read_all(const std::string& path) {
  std::ifstream f(path);
  if (!f) return json::object();
  try {
    return json::parse(f);
  } catch (const json::exception&) {
    return json::object();  // the peaks cache reports an unreadable file itself
  }
}
}  // namespace

double LinkPeaks::all_reduce_seconds(double bytes, int p) const {
  if (p <= 1 || bytes <= 0) return 0;
  if (measured && p == ranks && times.size() >= 2) {
    // Log-log interpolation between the measured sizes; beyond them, the end's bandwidth.
    if (bytes <= times.front().first) return times.front().second;
    for (size_t i = 1; i < times.size(); ++i) {
      auto [b0, t0] = times[i - 1];
      auto [b1, t1] = times[i];
      if (bytes <= b1) {
        double f = std::log(bytes / b0) / std::log(b1 / b0);
        return std::exp(std::log(t0) + f * (std::log(t1) - std::log(t0)));
      }
    }
    return times.back().second * bytes / times.back().first;
  }
  double steps = 2.0 * (p - 1);
  return steps * latency_s + steps / p * bytes / std::max(bus_bandwidth, 1.0);
}

LinkPeaks link_from_measurement(const std::vector<std::pair<double, double>>& times, int size,
                                int hosts) {
  FREIGHT_CHECK(size >= 2 && !times.empty(), "link_from_measurement: needs 2 ranks and times");
  LinkPeaks l;
  l.kind = hosts <= 1 ? "mpi, 1 host" : "mpi, several hosts";
  l.measured = true;
  l.ranks = size;
  l.times = times;
  std::sort(l.times.begin(), l.times.end());
  const double steps = 2.0 * (size - 1);
  l.latency_s = l.times.front().second / steps;
  for (auto [b, t] : l.times) l.bus_bandwidth = std::max(l.bus_bandwidth, steps / size * b / t);
  return l;
}

void save_link(const LinkPeaks& link, const std::string& path) {
  json all = read_all(path);
  if (!all.contains("links") || !all["links"].is_object()) all["links"] = json::object();
  json t = json::array();
  for (auto [b, s] : link.times) t.push_back({b, s});
  all["links"][link.kind] = {{"ranks", link.ranks},
                             {"measured_at", link.measured_at},
                             {"times", t},
                             {"latency_s", link.latency_s},
                             {"bus_bandwidth", link.bus_bandwidth}};
  // The cache's folder may not exist yet: a link can be the first thing measured on a machine.
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!dir.empty()) std::filesystem::create_directories(dir, ec);
  io::write_file_atomically(path, all.dump(2) + "\n", "peaks cache");
}

bool load_link(const std::string& kind, const std::string& path, LinkPeaks& out) {
  json all = read_all(path);
  if (!all.contains("links") || !all["links"].contains(kind)) return false;
  try {
    const json& j = all["links"][kind];
    LinkPeaks l;
    l.kind = kind;
    l.measured = true;
    l.ranks = j.at("ranks").get<int>();
    l.measured_at = j.value("measured_at", "");
    for (const json& p : j.at("times"))
      l.times.emplace_back(p[0].get<double>(), p[1].get<double>());
    l.latency_s = j.at("latency_s").get<double>();
    l.bus_bandwidth = j.at("bus_bandwidth").get<double>();
    out = l;
    return true;
  } catch (const json::exception& e) {
    throw Error(
        fmt::format("peaks cache '{}': the link '{}' is malformed ({}); run `freight "
                    "devices --measure --nproc 2` again",
                    path, kind, e.what()));
  }
}

// NVLink 4 between the 8 H100s of a node: nccl-tests report all-reduce bus bandwidths around
// 370-480 GB/s at large sizes; a few µs per ring step.
LinkPeaks nvlink_h100() {
  LinkPeaks l;
  l.kind = "NVLink (H100 datasheet)";
  l.latency_s = 5e-6;
  l.bus_bandwidth = 370e9;
  return l;
}

// One 400 Gb/s InfiniBand NDR adapter per GPU: 50 GB/s, about 45 GB/s of all-reduce bus
// bandwidth; the ring's steps between nodes cost about 10 µs.
LinkPeaks infiniband_ndr() {
  LinkPeaks l;
  l.kind = "InfiniBand NDR (datasheet)";
  l.latency_s = 10e-6;
  l.bus_bandwidth = 45e9;
  return l;
}

}  // namespace freight
