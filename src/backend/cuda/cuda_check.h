// One checking macro for every CUDA-family status code (runtime, cuBLAS, cuDNN): a failure
// throws freight::Error naming the call, the file and line, and the library's own message.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <string>

#include "freight/error.h"

namespace freight::cuda {

std::string status_text(cudaError_t s);
std::string status_text(cublasStatus_t s);
std::string status_text(cudnnStatus_t s);
bool is_ok(cudaError_t s);
bool is_ok(cublasStatus_t s);
bool is_ok(cudnnStatus_t s);

[[noreturn]] void throw_status(const std::string& what, const char* call, const char* file,
                               int line);

}  // namespace freight::cuda

#define FREIGHT_CUDA_CHECK(call)                                                          \
  do {                                                                                    \
    auto freight_status_ = (call);                                                        \
    if (!::freight::cuda::is_ok(freight_status_)) [[unlikely]]                            \
      ::freight::cuda::throw_status(::freight::cuda::status_text(freight_status_), #call, \
                                    __FILE__, __LINE__);                                  \
  } while (0)

// After every kernel launch: catches bad launch configurations at the launch site.
#define FREIGHT_CUDA_CHECK_LAUNCH() FREIGHT_CUDA_CHECK(cudaGetLastError())
