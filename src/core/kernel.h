// Kernel slots: one per kernel, holding an implementation per device type. Op code calls
// `slot(device_type, args...)`; backends fill their entries at load time with
// FREIGHT_REGISTER_KERNEL. A missing implementation is a loud error naming the kernel and the
// device, never a silent fallback to another device.
//
// The CPU kernels live in a module per instruction-set level (libfreight_cpu_avx2.so, ...,
// src/backend/cpu/cpu_isa.cpp): the first look-up that finds a CPU slot empty loads the module
// the CPU runs best, whose static registrars fill the slots, and looks again. So the hot path
// is one load and one test, as before. The CUDA kernels are likewise in the CUDA backend's
// library (libfreight_cuda.so), loaded by the first look-up of an empty CUDA entry if nothing
// asked about CUDA before.
#pragma once
#include <utility>

#include "freight/device.h"
#include "freight/error.h"

namespace freight {

namespace detail {
// Loads the CPU kernels of the chosen instruction-set level once (thread-safe; throws a
// freight::Error naming the level and the paths tried when it cannot). A no-op when the kernels
// are compiled into the library.
void load_cpu_kernels();
// Loads the CUDA backend, whose kernels fill the CUDA entries, if it is not loaded yet (a no-op
// without one: the slot then says the kernel is missing). core/backend.cpp.
void load_cuda_backend();
}  // namespace detail

template <class Sig>
class Kernel;

template <class R, class... Args>
class Kernel<R(Args...)> {
 public:
  using Fn = R (*)(Args...);
  constexpr explicit Kernel(const char* name) : name_(name) {}
  const char* name() const { return name_; }
  void set(DeviceType type, Fn fn) { impl_[int(type)] = fn; }
  bool has(DeviceType type) const {
    if (impl_[int(type)] == nullptr) load(type);
    return impl_[int(type)] != nullptr;
  }
  Fn get(DeviceType type) const {
    Fn fn = impl_[int(type)];
    if (!fn) [[unlikely]]
      return load_or_fail(type);
    return fn;
  }
  template <class... A>
  R operator()(DeviceType type, A&&... args) const {
    return get(type)(std::forward<A>(args)...);
  }

 private:
  static void load(DeviceType type) {
    if (type == DeviceType::CPU)
      detail::load_cpu_kernels();
    else
      detail::load_cuda_backend();
  }
  Fn load_or_fail(DeviceType type) const {
    load(type);
    Fn fn = impl_[int(type)];
    if (!fn) missing(type);
    return fn;
  }
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
// Default visibility, even in the CPU kernel modules (compiled with -fvisibility=hidden): a
// module's registrars must fill libfreight's slots, which the dynamic linker binds them to,
// not copies of their own.
#define FREIGHT_KERNEL(name, ...)                                                     \
  __attribute__((visibility("default"))) inline ::freight::Kernel<__VA_ARGS__> name { \
#name                                                                             \
  }

#define FREIGHT_CONCAT_INNER(a, b) a##b
#define FREIGHT_CONCAT(a, b) FREIGHT_CONCAT_INNER(a, b)
// Registers `fn` as the implementation of `slot` for DeviceType::device (CPU or CUDA).
#define FREIGHT_REGISTER_KERNEL(slot, device, fn)                                        \
  static ::freight::KernelRegistrar FREIGHT_CONCAT(freight_kernel_registrar_, __LINE__)( \
      slot, ::freight::DeviceType::device, fn)

}  // namespace freight
