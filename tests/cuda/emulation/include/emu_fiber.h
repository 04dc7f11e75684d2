// Fibers for the emulated GPU threads: a stack each and a switch that saves and restores only
// the callee-saved registers (x86-64 System V), so a switch costs a few nanoseconds. ucontext's
// swapcontext also saves and restores the signal mask with a system call on every switch, which
// made barrier-heavy kernels crawl under the emulation.
//
// AddressSanitizer must be told about every stack switch (its fake stacks and stack bounds are
// per stack); the switch below does so when the build is sanitized.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define EMU_FIBER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMU_FIBER_ASAN 1
#endif
#endif
#ifdef EMU_FIBER_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

#if !defined(__x86_64__)
#error "the CUDA emulation's fibers are written for x86-64"
#endif

// Saves the callee-saved registers on the current stack, stores its stack pointer in *save_sp,
// and continues on the stack `next_sp` (src/emu_fiber_switch.cpp).
extern "C" void emu_fiber_switch(void** save_sp, void* next_sp);

namespace emu {

struct Fiber {
  void* sp = nullptr;            // saved stack pointer while the fiber is switched out
  std::vector<char> stack;       // empty for the host thread's own stack
  const void* bottom = nullptr;  // the stack's lowest address and size, for ASan
  size_t size = 0;
};

// Prepares `f` to start `entry` (which never returns) on its own stack at its next switch-in.
// The initial frame is what emu_fiber_switch pops: six callee-saved registers, then `entry` as
// the return address; a zero below it keeps the ABI's 16-byte alignment at entry.
inline void fiber_start(Fiber& f, void (*entry)()) {
#ifdef EMU_FIBER_ASAN
  // A fiber restarted for a new block: the frames its previous thread left on the stack (it
  // never returns) keep their redzones poisoned until the stack is cleared here.
  ASAN_UNPOISON_MEMORY_REGION(f.stack.data(), f.stack.size());
#endif
  char* top = f.stack.data() + f.stack.size();
  top = reinterpret_cast<char*>(reinterpret_cast<uintptr_t>(top) & ~uintptr_t(15));
  void** sp = reinterpret_cast<void**>(top);
  *--sp = nullptr;                              // entry's (never used) return address
  *--sp = reinterpret_cast<void*>(entry);       // where the first switch "returns" to
  for (int i = 0; i < 6; ++i) *--sp = nullptr;  // rbp, rbx, r12-r15
  f.sp = sp;
  f.bottom = f.stack.data();
  f.size = f.stack.size();
}

// Switches from `from` to `to`. `from_exits` tells ASan that `from`'s frames are finished (a
// thread whose kernel body returned), so its fake stack can go.
inline void fiber_switch(Fiber& from, Fiber& to, bool from_exits = false) {
#ifdef EMU_FIBER_ASAN
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(from_exits ? nullptr : &fake, to.bottom, to.size);
  emu_fiber_switch(&from.sp, to.sp);
  // Back on `from`: learn the bounds of the stack we came from (the host stack on first use).
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#else
  (void)from_exits;
  emu_fiber_switch(&from.sp, to.sp);
#endif
}

// The first code a fresh fiber runs must complete the switch that started it.
inline void fiber_arrived(const void** came_from_bottom, size_t* came_from_size) {
#ifdef EMU_FIBER_ASAN
  __sanitizer_finish_switch_fiber(nullptr, came_from_bottom, came_from_size);
#else
  (void)came_from_bottom;
  (void)came_from_size;
#endif
}

}  // namespace emu
