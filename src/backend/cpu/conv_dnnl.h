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

// Each pass on `threads` OpenMP threads; false (nothing written) when oneDNN refuses the geometry,
// in which case the caller runs its own engine. dw may not be null; db may be.
bool dnnl_conv_forward(const float* x, const float* w, const float* b, const Conv2dGeometry& g,
                       float* y, int threads);
bool dnnl_conv_backward_input(const float* gy, const float* w, const Conv2dGeometry& g, float* dx,
                              int threads);
bool dnnl_conv_backward_weight(const float* gy, const float* x, const Conv2dGeometry& g, float* dw,
                               float* db, int threads);
// The bytes a pass takes from Freight's allocator while it runs (its blocked copies and
// oneDNN's scratchpad), building and caching its primitive as a run would (with a bias, as a
// layer has); -1 when oneDNN refuses the geometry or is not built.
int64_t dnnl_conv_arena_bytes(const Conv2dGeometry& g, int pass, int threads);

}  // namespace freight::cpu
