// The convolution engine a test forces and the count of passes per engine (conv_cpu.h). Kept in
// libfreight, not in the CPU kernel modules, so that the state is one whatever level is loaded.
#include <fmt/format.h>

#include <atomic>
#include <cstdlib>
#include <string>

#include "backend/cpu/conv_cpu.h"
#include "backend/cpu/conv_dnnl.h"
#include "freight/error.h"
#include "freight/runtime.h"

namespace freight::cpu {
namespace {
std::atomic<int> g_engine{int(ConvEngine::Auto)};
// Passes run per (pass, engine), counted by the engine that ran, for tests that check a forced
// engine really ran.
std::atomic<int64_t> g_runs[3][8];

// FREIGHT_CONV_DNNL=0 (or "off", "false") keeps Auto off oneDNN from the start.
bool dnnl_allowed_at_start() {
  const char* v = std::getenv("FREIGHT_CONV_DNNL");
  if (!v) return true;
  const std::string s = v;
  return !(s == "0" || s == "off" || s == "false" || s == "no");
}
std::atomic<bool> g_dnnl_allowed{dnnl_allowed_at_start()};

const char* engine_name(ConvEngine e) {
  switch (e) {
    case ConvEngine::Auto:
      return "Auto";
    case ConvEngine::Blas:
      return "Blas";
    case ConvEngine::Panel:
      return "Panel";
    case ConvEngine::Implicit:
      return "Implicit";
    case ConvEngine::Direct:
      return "Direct";
    case ConvEngine::Dnnl:
      return "Dnnl";
    case ConvEngine::Winograd:
      return "Winograd";
    case ConvEngine::WinogradF2:
      return "WinogradF2";
  }
  return "?";
}
}  // namespace

void set_conv_engine(ConvEngine e) {
  const bool onednn = e == ConvEngine::Dnnl || e == ConvEngine::Winograd;
  FREIGHT_CHECK(!onednn || dnnl_conv_built(),
                fmt::format("convolution engine {}: {}", engine_name(e), dnnl_conv_version()));
  const bool needs_tiles = e != ConvEngine::Auto && e != ConvEngine::Blas && !onednn;
  FREIGHT_CHECK(!needs_tiles || conv_has_tile_engines(),
                fmt::format("convolution engine {} needs the avx2 or avx512 CPU kernels, but the "
                            "{} kernels are loaded ({}); force Blas or Auto, or run where "
                            "FREIGHT_CPU_ISA=avx2 works",
                            engine_name(e), cpu_kernel_isa(), cpu_kernel_isa_reason()));
  g_engine = int(e);
}
void set_conv_dnnl_allowed(bool allowed) {
  g_dnnl_allowed = allowed;
}
bool conv_dnnl_allowed() {
  return g_dnnl_allowed.load(std::memory_order_relaxed) && dnnl_conv_built();
}
int64_t conv_engine_runs(int pass, ConvEngine e) {
  return g_runs[pass][int(e)].load(std::memory_order_relaxed);
}
bool conv_has_tile_engines() {
  return conv_tile_engines_built(DeviceType::CPU);
}
ConvEngine forced_conv_engine() {
  return ConvEngine(g_engine.load(std::memory_order_relaxed));
}
void count_conv_engine_run(int pass, ConvEngine e) {
  g_runs[pass][int(e)].fetch_add(1, std::memory_order_relaxed);
}

}  // namespace freight::cpu
