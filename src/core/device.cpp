#include "freight/device.h"

#include <fmt/format.h>

#include <charconv>

#include "core/backend.h"
#include "freight/error.h"

namespace freight {

std::string Device::str() const {
  return is_cpu() ? std::string("cpu") : fmt::format("cuda:{}", index);
}

Device parse_device(std::string_view text) {
  if (text == "cpu") return Device::cpu();
  if (text == "cuda" || text == "gpu") return Device::cuda(0);
  if (text.starts_with("cuda:")) {
    std::string_view num = text.substr(5);
    int index = -1;
    auto [p, ec] = std::from_chars(num.data(), num.data() + num.size(), index);
    if (ec == std::errc() && p == num.data() + num.size() && index >= 0) return Device::cuda(index);
  }
  throw Error(fmt::format("--device '{}' is not a device: use cpu, cuda, cuda:N or auto", text));
}

int cuda_device_count() {
  if (!cuda_driver_missing().empty() || !has_backend(DeviceType::CUDA)) return 0;
  std::string why;
  return backend_for(DeviceType::CUDA).device_count(&why);
}

bool cuda_available(std::string* why) {
  // The driver first: without it the backend need not be loaded to know there is no GPU.
  if (const std::string& driver = cuda_driver_missing(); !driver.empty()) {
    if (why) *why = driver;
    return false;
  }
  if (!has_backend(DeviceType::CUDA)) {
    if (why) *why = missing_backend_reason(DeviceType::CUDA);
    return false;
  }
  std::string reason;
  int n = backend_for(DeviceType::CUDA).device_count(&reason);
  if (n <= 0 && why) *why = reason.empty() ? "no CUDA device found" : reason;
  return n > 0;
}

Device resolve_device(std::string_view text, std::string* note) {
  if (text == "auto") {
    std::string why;
    if (cuda_available(&why)) {
      if (note) *note = "--device auto picked cuda:0";
      return Device::cuda(0);
    }
    if (note) *note = "--device auto picked cpu (" + why + ")";
    return Device::cpu();
  }
  Device d = parse_device(text);
  if (d.is_cuda()) {
    std::string why;
    FREIGHT_CHECK(cuda_available(&why), fmt::format("--device {}: no usable GPU: {}", text, why));
    int n = cuda_device_count();
    FREIGHT_CHECK(d.index < n, fmt::format("--device {}: only {} CUDA device(s) visible (indices "
                                           "0..{}; CUDA_VISIBLE_DEVICES applies)",
                                           text, n, n - 1));
  }
  return d;
}

}  // namespace freight
