// The oneDNN convolution engine (internal): fp32 convolutions on Freight's NCHW tensors through
// oneDNN's channel-blocked kernels, with the reorders in and out counted in each pass. Lives in
// libfreight, beside the primitives it caches, and is called by the CPU kernel modules'
// convolution (conv_cpu.cpp), which picks it per pass. Built where CMake finds oneDNN 2.x
// (Debian's libdnnl-dev); elsewhere dnnl_conv_built() is false and nothing picks it.
#pragma once
#include <cstdint>
#include <string>

#include "ops/kernels/conv.h"

namespace freight::cpu {

// Whether this build has the engine (oneDNN was found).
bool dnnl_conv_built();
// "oneDNN 2.6.3" or why there is none.
std::string dnnl_conv_version();

// oneDNN's algorithms: its direct kernels, or Winograd's minimal filtering F(4x4, 3x3), which
// computes each 4x4 block of outputs of a 3x3 convolution from a 6x6 block of inputs with 36
// multiplies per channel pair where the direct sum takes 144 (its transforms into and out of
// that domain are additions, shared by all the channels they feed). oneDNN 2.x has it for 3x3
// stride-1 convolutions on 16-channel blocks with AVX-512 (jit_wino_4x3); elsewhere it refuses.
enum class DnnlAlgorithm { Direct, Winograd };

// Whether oneDNN has its Winograd kernels on this CPU (it takes a 16-channel 3x3 convolution).
bool dnnl_winograd_runs();

// Each pass on `threads` OpenMP threads; false (nothing written) when oneDNN refuses the geometry,
// in which case the caller runs its own engine. dw may not be null; db may be.
bool dnnl_conv_forward(const float* x, const float* w, const float* b, const Conv2dGeometry& g,
                       float* y, int threads, DnnlAlgorithm algorithm);
bool dnnl_conv_backward_input(const float* gy, const float* w, const Conv2dGeometry& g, float* dx,
                              int threads, DnnlAlgorithm algorithm);
bool dnnl_conv_backward_weight(const float* gy, const float* x, const Conv2dGeometry& g, float* dw,
                               float* db, int threads, DnnlAlgorithm algorithm);
// The bytes a pass takes from Freight's allocator while it runs (its blocked copies and
// oneDNN's scratchpad), building and caching its primitive as a run would (with a bias, as a
// layer has); -1 when oneDNN refuses the geometry or is not built.
int64_t dnnl_conv_arena_bytes(const Conv2dGeometry& g, int pass, int threads,
                              DnnlAlgorithm algorithm);

}  // namespace freight::cpu
