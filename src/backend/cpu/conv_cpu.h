// Test and benchmark hooks of the CPU convolution (internal). The engines themselves are in the
// CPU kernel modules (conv_cpu.cpp); the choice a test forces and the run counters live in
// libfreight (conv_engine_choice.cpp), so they are one state whatever module is loaded.
#pragma once
#include <cstdint>

#include "core/kernel.h"

namespace freight::cpu {
enum class ConvEngine : int {
  Auto,        // the fastest applicable one
  Blas,        // im2col + cblas (portable; the only one of the built-in baseline kernels)
  Panel,       // register tiles over im2col panels (any stride; avx2 and avx512 kernels)
  Implicit,    // register tiles over shifted windows of padded planes (stride 1)
  Direct,      // register tiles of output pixels x output-channel vectors (horizontal stride 1, 2)
  Dnnl,        // oneDNN's blocked-layout kernels with reorders in and out (fp32; conv_dnnl.h)
  Winograd,    // oneDNN's Winograd F(4x4, 3x3) on the same blocked layouts and reorders (fp32; 3x3,
               // stride 1, channel counts of whole 16-lane vectors, AVX-512; conv_dnnl.h)
  WinogradF2,  // Freight's Winograd F(2x2, 3x3) (3x3, stride 1, dilation 1; its input gradient
               // where that is a convolution, padding at most 2; conv_winograd.h)
};
// Forces an engine for all CPU convolutions where it applies (else Panel), so tests can check the
// engines against each other. Forcing a tile engine when the loaded CPU kernels have none (the
// built-in baseline kernels, a CPU without AVX2) throws rather than run another engine. Not
// thread-safe with convolutions running. Forcing Dnnl or Winograd where oneDNN is not built
// throws; forced, they run fp32 passes only (float64 passes run the engine Auto picks), and a
// geometry oneDNN refuses runs on the engine Auto would pick among Freight's.
void set_conv_engine(ConvEngine e);
// Whether Auto may pick oneDNN (on by default where it is built; FREIGHT_CONV_DNNL=0 in the
// environment turns it off at start-up). Off, Auto picks among Freight's own engines only: for
// A/B comparisons, and for results bit-identical to a build without oneDNN.
void set_conv_dnnl_allowed(bool allowed);
bool conv_dnnl_allowed();
// How many times `pass` (0 forward, 1 input gradient, 2 weight gradient) has run on engine e.
int64_t conv_engine_runs(int pass, ConvEngine e);
// Whether the loaded CPU kernels have Freight's tile engines (Panel, Implicit, Direct): the
// avx512 and avx2 levels do (conv_tiles.h), the built-in baseline does not.
bool conv_has_tile_engines();

// For the engines in the kernel module: the engine forced (Auto when none), and a count of a
// pass that ran on engine e.
ConvEngine forced_conv_engine();
void count_conv_engine_run(int pass, ConvEngine e);
// Filled by the kernel module: whether it has the tile engines.
FREIGHT_KERNEL(conv_tile_engines_built, bool());
}  // namespace freight::cpu
