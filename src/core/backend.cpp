#include "core/backend.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include "core/engine_modules.h"
#include "freight/error.h"
#include "freight/runtime.h"

namespace freight {

namespace {
DeviceBackend* g_backends[kNumDeviceTypes] = {};

// Why the CUDA backend is missing, for backend_for's error and cuda_available's reason.
std::string g_cuda_missing =
    "this build of Freight has no CUDA backend (nvcc was not found when it was configured, or "
    "FREIGHT_CUDA=OFF)";

// The CUDA backend registers itself from the one place that knows whether it was built, on the
// first question about CUDA. In the main build it is a library of its own beside libfreight
// (FREIGHT_CUDA_MODULE, CMakeLists.txt), loaded only then: its CUDA libraries' start-up is not
// paid by a process that never asks. A module that cannot be loaded (a CUDA library missing on
// this machine) leaves the CPU working and is the reason CUDA is unavailable.
struct CudaRegistration {
  CudaRegistration() {
#if FREIGHT_WITH_CUDA && defined(FREIGHT_CUDA_MODULE)
    std::string failures;
    void* module = detail::open_engine_module(FREIGHT_CUDA_MODULE, &failures);
    auto* entry = module
                      ? reinterpret_cast<void (*)()>(dlsym(module, "freight_register_cuda_backend"))
                      : nullptr;
    if (!entry) {
      g_cuda_missing = module ? fmt::format(
                                    "the CUDA backend {} has no entry point "
                                    "freight_register_cuda_backend",
                                    FREIGHT_CUDA_MODULE)
                              : fmt::format("the CUDA backend {} could not be loaded; tried:{}",
                                            FREIGHT_CUDA_MODULE, failures);
      return;
    }
    entry();
#elif FREIGHT_WITH_CUDA
    register_cuda_backend();
#endif
    // set_deterministic may have been called before the backend was there.
    if (DeviceBackend* cuda = g_backends[int(DeviceType::CUDA)])
      cuda->set_deterministic(deterministic());
  }
};
}  // namespace

void register_backend(DeviceType type, DeviceBackend* backend) {
  g_backends[int(type)] = backend;
}

void* DeviceBackend::allocate_pinned(size_t, int) {
  throw Error(fmt::format("pinned host memory needs a CUDA device ({} backend)", name()));
}
void DeviceBackend::deallocate_pinned(void*, size_t, int) {
  throw Error(fmt::format("pinned host memory needs a CUDA device ({} backend)", name()));
}
std::unique_ptr<PendingUpload> DeviceBackend::upload(void*, const void*, size_t, int) {
  throw Error(fmt::format("asynchronous uploads need a CUDA device ({} backend)", name()));
}
std::unique_ptr<DeviceGraph> DeviceBackend::capture(int, const std::function<void()>&) {
  throw Error(fmt::format("graph capture needs a CUDA device ({} backend)", name()));
}
std::unique_ptr<RankSums> DeviceBackend::rank_sums(int, const RankSumsSetup&) {
  throw Error(fmt::format("sums of device memory over the ranks need a GPU with NCCL ({} backend)",
                          name()));
}

bool has_backend(DeviceType type) {
  if (type == DeviceType::CUDA) {
    static CudaRegistration once;
  }
  return g_backends[int(type)] != nullptr;
}

bool backend_loaded(DeviceType type) {
  return g_backends[int(type)] != nullptr;
}

std::string missing_backend_reason(DeviceType type) {
  if (has_backend(type)) return "";
  return type == DeviceType::CUDA ? g_cuda_missing : std::string("no CPU backend registered");
}

DeviceBackend& backend_for(DeviceType type) {
  FREIGHT_CHECK(has_backend(type), missing_backend_reason(type));
  return *g_backends[int(type)];
}

namespace detail {
void load_cuda_backend() {
  (void)has_backend(DeviceType::CUDA);
}
}  // namespace detail

const std::string& cuda_driver_missing() {
#if FREIGHT_WITH_CUDA && defined(FREIGHT_CUDA_MODULE)
  // The CUDA runtime reaches the GPU through the driver's libcuda.so.1, which it dlopens by that
  // name; where the loader cannot find it there is no GPU to count, and loading the backend's
  // CUDA libraries only to hear so costs a tenth of a second or more.
  static const std::string reason = [] {
    if (dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL)) return std::string();
    const char* why = dlerror();
    return fmt::format("no NVIDIA driver: libcuda.so.1 cannot be loaded ({})",
                       why ? why : "unknown error");
  }();
  return reason;
#else
  static const std::string none;  // a CPU-only build says so itself; the emulation has no driver
  return none;
#endif
}

}  // namespace freight
