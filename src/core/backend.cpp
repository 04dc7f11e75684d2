#include "core/backend.h"

#include <fmt/format.h>

#include "freight/error.h"

namespace freight {

namespace {
DeviceBackend* g_backends[kNumDeviceTypes] = {};

// The CUDA backend registers itself from the one place that knows whether it was built.
struct CudaRegistration {
  CudaRegistration() {
#if FREIGHT_WITH_CUDA
    register_cuda_backend();
#endif
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
  static CudaRegistration once;
  return g_backends[int(type)] != nullptr;
}

DeviceBackend& backend_for(DeviceType type) {
  FREIGHT_CHECK(has_backend(type),
                type == DeviceType::CUDA
                    ? std::string("this build of Freight has no CUDA backend (nvcc was not found "
                                  "when it was configured, or FREIGHT_CUDA=OFF)")
                    : std::string("no CPU backend registered"));
  return *g_backends[int(type)];
}

}  // namespace freight
