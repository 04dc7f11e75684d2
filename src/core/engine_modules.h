// The modules libfreight keeps beside itself and dlopens when first needed: the CPU kernels of
// one instruction-set level (src/backend/cpu/cpu_isa.cpp) and the CUDA backend
// (src/core/backend.cpp). Nothing links them, so they must sit in libfreight's directory, in the
// build tree and after installation alike.
#pragma once
#include <filesystem>
#include <string>

namespace freight::detail {

// The directory of the loaded libfreight.so (found with dladdr on one of its functions), absolute;
// empty when the loader cannot say.
std::filesystem::path engine_library_dir();

// dlopens `file` (a file name, no directory) from libfreight's directory first, then through the
// loader's own search (LD_LIBRARY_PATH, the run path). RTLD_LOCAL: a module's symbols never take
// the place of libfreight's. Returns the handle, or nullptr with each path tried and the loader's
// reason, one per line, in `failures`.
void* open_engine_module(const std::string& file, std::string* failures);

}  // namespace freight::detail
