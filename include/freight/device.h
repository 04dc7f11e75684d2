// Where a tensor lives. Ops refuse operands on different devices; data only moves through an
// explicit Tensor::to(device).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace freight {

enum class DeviceType : uint8_t { CPU = 0, CUDA = 1 };
inline constexpr int kNumDeviceTypes = 2;

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;

  static Device cpu() { return {DeviceType::CPU, 0}; }
  static Device cuda(int index = 0) { return {DeviceType::CUDA, index}; }
  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  std::string str() const;  // "cpu", "cuda:0"
  bool operator==(const Device&) const = default;
};

// Parses "cpu", "cuda", "cuda:N". "auto" is resolved by resolve_device(). Throws on anything else.
Device parse_device(std::string_view text);

// True when the CUDA backend was compiled in and at least one GPU answers. When false, `why`
// (if given) receives the reason: not built with CUDA, no driver, no device, ...
bool cuda_available(std::string* why = nullptr);
int cuda_device_count();

// "auto" -> cuda:0 when a GPU works, else cpu; anything else is parsed and checked: asking for a
// GPU that is not usable is an error carrying the reason, never a silent fallback to the CPU.
Device resolve_device(std::string_view text, std::string* note = nullptr);

}  // namespace freight
