// Kernel slots: one per kernel, holding an implementation per device type. Op code calls
// `slot(device_type, args...)`; backends fill their entries at load time with
// FREIGHT_REGISTER_KERNEL. A missing implementation is a loud error naming the kernel and the
// device, never a silent fallback to another device.
#pragma once
#include <utility>

#include "freight/device.h"
#include "freight/error.h"

namespace freight {

template <class Sig>
class Kernel;

template <class R, class... Args>
class Kernel<R(Args...)> {
 public:
  using Fn = R (*)(Args...);
  constexpr explicit Kernel(const char* name) : name_(name) {}
  const char* name() const { return name_; }
  void set(DeviceType type, Fn fn) { impl_[int(type)] = fn; }
  bool has(DeviceType type) const { return impl_[int(type)] != nullptr; }
  Fn get(DeviceType type) const {
    Fn fn = impl_[int(type)];
    if (!fn) [[unlikely]]
      missing(type);
    return fn;
  }
  template <class... A>
  R operator()(DeviceType type, A&&... args) const {
    return get(type)(std::forward<A>(args)...);
  }

 private:
  [[noreturn]] void missing(DeviceType type) const {
    throw Error(std::string("kernel '") + name_ + "' has no implementation for device " +
                (type == DeviceType::CPU ? "cpu" : "cuda") +
                " (this build lacks it; Freight never falls back to another device)");
  }
  const char* name_;
  Fn impl_[kNumDeviceTypes] = {};
};

struct KernelRegistrar {
  template <class Slot, class Fn>
  KernelRegistrar(Slot& slot, DeviceType type, Fn fn) {
    slot.set(type, fn);
  }
};

// Declares a kernel slot in a kernel header (one definition program-wide: an inline variable).
#define FREIGHT_KERNEL(name, ...) inline ::freight::Kernel<__VA_ARGS__> name{#name}

#define FREIGHT_CONCAT_INNER(a, b) a##b
#define FREIGHT_CONCAT(a, b) FREIGHT_CONCAT_INNER(a, b)
// Registers `fn` as the implementation of `slot` for DeviceType::device (CPU or CUDA).
#define FREIGHT_REGISTER_KERNEL(slot, device, fn)                                     \
  static ::freight::KernelRegistrar FREIGHT_CONCAT(freight_kernel_registrar_, __LINE__)( \
      slot, ::freight::DeviceType::device, fn)

}  // namespace freight
