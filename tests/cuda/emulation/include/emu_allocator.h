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
#pragma once
#include <cstddef>
#include <cstdlib>
#include <cstring>

#if defined(__SANITIZE_ADDRESS__)
#define EMU_ALLOCATOR_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMU_ALLOCATOR_ASAN 1
#endif
#endif
#ifdef EMU_ALLOCATOR_ASAN
#include <sanitizer/asan_interface.h>
#endif

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

// A block of `size` bytes handed out for a tensor of `bytes` bytes.
inline void block_handed_out(void* p, size_t bytes, size_t size) {
#ifdef EMU_ALLOCATOR_ASAN
  ASAN_UNPOISON_MEMORY_REGION(p, bytes);
  if (size > bytes) ASAN_POISON_MEMORY_REGION(static_cast<char*>(p) + bytes, size - bytes);
#else
  (void)p, (void)bytes, (void)size;
#endif
}

// A block back in a cache's free list (no queued work uses it any more: the emulation runs
// uncaptured work when it is queued).
inline void block_cached(void* p, size_t size) {
#ifdef EMU_ALLOCATOR_ASAN
  ASAN_POISON_MEMORY_REGION(p, size);
#else
  (void)p, (void)size;
#endif
}

// A block about to be returned to the system (cudaFree, cudaFreeHost).
inline void block_released(void* p, size_t size) {
#ifdef EMU_ALLOCATOR_ASAN
  ASAN_UNPOISON_MEMORY_REGION(p, size);
#else
  (void)p, (void)size;
#endif
}

}  // namespace emu
