// The cuDNN handle of each device. Internal to the CUDA backend.
#pragma once
#include <cudnn.h>

namespace freight::cuda {

// The handle of `device`, created on first use. As with the shared cuBLAS handle, callers set
// its stream (cudnnSetStream(h, stream(device))) before each use.
cudnnHandle_t cudnn(int device);

}  // namespace freight::cuda
