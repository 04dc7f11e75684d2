// The per-device cuDNN handles (host code only; a .cu file so that the CPU emulation of the
// backend, which translates every .cu file, builds it too).
#include <mutex>
#include <string>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_context.h"
#include "backend/cuda/cudnn_context.h"

namespace freight::cuda {

namespace {
constexpr int kMaxDevices = 64;  // as the backend's device table
struct HandleSlot {
  std::once_flag init;
  cudnnHandle_t handle = nullptr;
};
HandleSlot g_handles[kMaxDevices];
}  // namespace

cudnnHandle_t cudnn(int device) {
  FREIGHT_CHECK(device >= 0 && device < kMaxDevices,
                "bad CUDA device " + std::to_string(device) + " for cuDNN");
  HandleSlot& s = g_handles[device];
  // A failure leaves the flag unset, so the next call tries again (and reports again).
  std::call_once(s.init, [&] {
    set_device(device);
    FREIGHT_CUDA_CHECK(cudnnCreate(&s.handle));
    FREIGHT_CUDA_CHECK(cudnnSetStream(s.handle, stream(device)));
  });
  return s.handle;
}

}  // namespace freight::cuda
