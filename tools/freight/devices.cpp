// freight devices: the CPU and the GPUs this process can use.
#include <fmt/format.h>

#include "commands.h"
#include "freight/device.h"
#include "freight/runtime.h"

namespace freight::cli {

void add_devices(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("devices", "List the CPU and the GPUs Freight can use");
  cmd->callback([] {
    for (const DeviceInfo& d : list_devices()) {
      if (d.device.is_cpu()) {
        fmt::print("cpu      {}\n         {} hardware threads, {} memory ({} available)\n"
                   "         {}\n",
                   d.name, d.compute_units, format_bytes(double(d.memory_total)),
                   format_bytes(double(d.memory_free)), d.details);
      } else {
        fmt::print("{:<8} {}\n         compute capability {}, {} multiprocessors, {} memory ({} "
                   "free)\n         driver {}, runtime {}{}\n",
                   d.device.str(), d.name, d.compute_capability, d.compute_units,
                   format_bytes(double(d.memory_total)), format_bytes(double(d.memory_free)),
                   d.driver_version, d.runtime_version,
                   d.details.empty() ? "" : "\n         " + d.details);
      }
    }
    std::string why;
    if (!cuda_available(&why)) fmt::print("no GPU: {}\n", why);
  });
}

}  // namespace freight::cli
