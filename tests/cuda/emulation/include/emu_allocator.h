// The emulation's two allocator modes (EMU_ALLOCATOR), and AddressSanitizer poisoning of the
// caching allocator's blocks. Included by the backend's host code only in the emulation build.
//
//   exact (default): blocks have the tensor's exact byte count, so any access past a tensor's
//     end is outside its allocation.
//   rounded: the real GPU's size classes (block_cache.h), so blocks of one size class are
//     shared by tensors of different sizes, exactly the reuse a GPU sees. The slack past each
//     tensor is poisoned, and so is every block while it sits free in the cache: a kernel that
//     touches freed memory, or the slack, fails at once instead of reading what a later
//     tensor wrote.
// The poisoning is stream-ordered: a block freed by the host may still be used by work queued
// before the free (correct on a GPU, where later work on the same stream runs after it), so it
// is poisoned once that work has run (emu_streams.h), unless it is handed out again first.
#pragma once
#include <cstddef>
#include <cstdlib>
#include <cstring>

#include "emu_streams.h"  // (EMU_ALLOCATOR_ASAN, the stream-ordered poisoning)

namespace emu {

inline bool exact_block_sizes() {
  static const bool exact = [] {
    const char* mode = std::getenv("EMU_ALLOCATOR");
    if (!mode || std::strcmp(mode, "exact") == 0) return true;
    if (std::strcmp(mode, "rounded") == 0) return false;
    std::fprintf(stderr, "CUDA emulation: EMU_ALLOCATOR must be exact or rounded, not '%s'\n",
                 mode);
    std::abort();
  }();
  return exact;
}

// A block of `size` bytes handed out for a tensor of `bytes` bytes: usable at once, its slack
// poisoned once the work queued before now (which may still use it) has run.
inline void block_handed_out(void* p, size_t bytes, size_t size) {
  cancel_poison(p, size);
#ifdef EMU_ALLOCATOR_ASAN
  ASAN_UNPOISON_MEMORY_REGION(p, size);
#endif
  if (size > bytes) defer_poison(static_cast<char*>(p) + bytes, size - bytes);
}

// A block back in a cache's free list: poisoned once the work queued before now has run.
inline void block_cached(void* p, size_t size) {
  defer_poison(p, size);
}

// A block about to be returned to the system (cudaFree, cudaFreeHost).
inline void block_released(void* p, size_t size) {
  cancel_poison(p, size);
#ifdef EMU_ALLOCATOR_ASAN
  ASAN_UNPOISON_MEMORY_REGION(p, size);
#endif
}

}  // namespace emu
