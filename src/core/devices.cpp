// list_devices(): the CPU from the operating system, GPUs from the CUDA backend.
#include <unistd.h>

#include <fstream>
#include <string>
#include <thread>

#include "core/backend.h"
#include "freight/runtime.h"

namespace freight {

namespace {
std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0) {
      size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  }
  return "unknown CPU";
}

size_t meminfo_kib(const std::string& key) {
  std::ifstream f("/proc/meminfo");
  std::string k;
  size_t v = 0;
  std::string unit;
  while (f >> k >> v >> unit)
    if (k == key + ":") return v;
  return 0;
}
}  // namespace

std::vector<DeviceInfo> list_devices() {
  std::vector<DeviceInfo> out;
  DeviceInfo cpu;
  cpu.device = Device::cpu();
  cpu.name = cpu_model();
  cpu.compute_units = int(std::thread::hardware_concurrency());
  cpu.memory_total = meminfo_kib("MemTotal") * 1024;
  cpu.memory_free = meminfo_kib("MemAvailable") * 1024;
  cpu.details = build_info();
  out.push_back(cpu);
  int n = cuda_device_count();
  for (int i = 0; i < n; ++i) {
    DeviceInfo g = backend_for(DeviceType::CUDA).info(i);
    g.device = Device::cuda(i);
    out.push_back(g);
  }
  return out;
}

}  // namespace freight
