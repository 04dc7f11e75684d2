#include "freight/runtime.h"

#include <fmt/format.h>

#include <atomic>

#include "core/backend.h"
#include "freight/error.h"

namespace freight {

namespace {
std::atomic<bool> g_poison{false};
std::atomic<Precision> g_precision{Precision::FP32};
std::atomic<bool> g_deterministic{false};
}  // namespace

void set_poison_allocations(bool on) {
  g_poison = on;
}
bool poison_allocations() {
  return g_poison;
}

MemoryStats memory_stats(Device d) {
  return backend_for(d.type).memory_stats(d.index);
}
void reset_peak_memory(Device d) {
  backend_for(d.type).reset_peak(d.index);
}
void empty_cache(Device d) {
  backend_for(d.type).empty_cache(d.index);
}
void synchronize(Device d) {
  backend_for(d.type).synchronize(d.index);
}

void set_precision(Precision p) {
  g_precision = p;
}
Precision precision() {
  return g_precision;
}

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::FP32:
      return "fp32";
    case Precision::TF32:
      return "tf32";
    case Precision::BF16:
      return "bf16";
  }
  return "?";
}

Precision parse_precision(std::string_view text) {
  for (Precision p : {Precision::FP32, Precision::TF32, Precision::BF16})
    if (text == precision_name(p)) return p;
  throw Error(fmt::format("--precision '{}' is not one of fp32, tf32, bf16", text));
}

void set_deterministic(bool on) {
  g_deterministic = on;
  for (DeviceType t : {DeviceType::CPU, DeviceType::CUDA})
    // A backend not loaded yet takes the setting when it loads (core/backend.cpp).
    if (backend_loaded(t)) backend_for(t).set_deterministic(on);
}
bool deterministic() {
  return g_deterministic;
}

}  // namespace freight
