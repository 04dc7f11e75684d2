// Test and benchmark hooks of the CPU convolution (internal).
#pragma once
#include <cstdint>

namespace freight::cpu {
enum class ConvEngine : int {
  Auto,      // the fastest applicable one
  Blas,      // im2col + cblas (portable; the only one without AVX-512)
  Panel,     // AVX-512 tiles over im2col panels (any stride)
  Implicit,  // AVX-512 tiles over shifted windows of padded planes (stride 1)
  Direct,    // AVX-512 tiles of output pixels x output-channel vectors (horizontal stride 1, 2)
};
// Forces an engine for all CPU convolutions where it applies (else Panel; everything is Blas
// without AVX-512), so tests can check the engines against each other. Not thread-safe with
// convolutions running.
void set_conv_engine(ConvEngine e);
// How many times `pass` (0 forward, 1 input gradient, 2 weight gradient) has run on engine e.
int64_t conv_engine_runs(int pass, ConvEngine e);
// Whether this build has the AVX-512 engines (compiled with AVX-512F).
bool conv_has_avx512_engine();
}  // namespace freight::cpu
