// CPU emulation of the part of CUDA that Freight's kernels use: execution-space keywords,
// thread and block indices, launches, __syncthreads, warp shuffles and a few intrinsics. A
// verification aid for machines without a GPU (README.md), never linked into the engine.
//
// Blocks run one after another. The threads of a block are ucontext coroutines on one OS
// thread; a thread runs until it reaches a barrier or returns. __syncthreads is released when
// every thread of the block is waiting at it (a thread that returns first is reported as a
// divergent barrier), a shuffle when all 32 lanes of its warp are waiting (a shuffle that not
// every lane reaches is reported as a deadlock). Two schedules: lockstep (each pass moves every
// warp one barrier further) and, with EMU_SERIAL set, serial (a warp runs through all its own
// shuffles before the next warp moves), which exposes missing block barriers around shared
// memory. Warps are visited in a pseudo-random order in both.
#pragma once
#include <ucontext.h>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static  // blocks run one at a time, so one static array per kernel suffices

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <utility>
#include <vector>

struct uint3 {
  unsigned x = 0, y = 0, z = 0;
};
struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
inline uint3 threadIdx, blockIdx;
inline dim3 blockDim, gridDim;

namespace emu {

enum State { Runnable, AtBlockBarrier, AtWarpBarrier, Finished };

struct Scheduler {
  std::vector<ucontext_t> ctx;
  std::vector<State> state;
  std::vector<std::vector<char>> stacks;
  ucontext_t main;
  unsigned cur = 0;
  std::function<void()> body;
  uint64_t warp_slots[32 * 32];  // shuffle values, per warp and lane
};
inline Scheduler g;
inline int g_last_error = 0;  // a cudaError_t value, returned once by cudaGetLastError

[[noreturn]] inline void die(const char* what) {
  std::fprintf(stderr, "CUDA emulation: %s (block %u, thread %u)\n", what, blockIdx.x, threadIdx.x);
  std::abort();
}

inline void trampoline() {
  g.body();
  g.state[g.cur] = Finished;
  swapcontext(&g.ctx[g.cur], &g.main);
}

inline void yield_to_scheduler() {
  swapcontext(&g.ctx[g.cur], &g.main);
}

inline bool serial_schedule() {
  static const bool serial = std::getenv("EMU_SERIAL") != nullptr;
  return serial;
}

// Runs thread t until it blocks or returns.
inline void step(unsigned t) {
  g.cur = t;
  threadIdx.x = t;
  swapcontext(&g.main, &g.ctx[t]);
}

inline void run_block(unsigned threads) {
  if (g.ctx.size() < threads) {
    g.ctx.resize(threads);
    g.stacks.resize(threads);
    for (auto& s : g.stacks) s.resize(128 * 1024);
  }
  g.state.assign(threads, Runnable);
  for (unsigned t = 0; t < threads; ++t) {
    getcontext(&g.ctx[t]);
    g.ctx[t].uc_stack.ss_sp = g.stacks[t].data();
    g.ctx[t].uc_stack.ss_size = g.stacks[t].size();
    g.ctx[t].uc_link = nullptr;
    makecontext(&g.ctx[t], trampoline, 0);
  }
  static uint64_t rng = 88172645463325252ull;  // xorshift64
  auto next = [] {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
  };
  unsigned warps = (threads + 31) / 32;
  std::vector<unsigned> order(warps);
  for (;;) {
    for (unsigned w = 0; w < warps; ++w) order[w] = w;
    for (unsigned w = warps; w > 1; --w) std::swap(order[w - 1], order[next() % w]);
    bool progress = false;
    for (unsigned w : order) {
      unsigned lo = w * 32, hi = lo + 32 < threads ? lo + 32 : threads;
      for (;;) {
        bool ran = false;
        for (unsigned t = lo; t < hi; ++t)
          if (g.state[t] == Runnable) step(t), ran = true;
        progress |= ran;
        bool whole_warp_waits = hi - lo == 32;
        for (unsigned t = lo; t < hi; ++t) whole_warp_waits &= g.state[t] == AtWarpBarrier;
        if (!whole_warp_waits) break;
        for (unsigned t = lo; t < hi; ++t) g.state[t] = Runnable;
        progress = true;
        if (!serial_schedule()) break;
      }
    }
    unsigned at_barrier = 0, finished = 0;
    for (unsigned t = 0; t < threads; ++t) {
      at_barrier += g.state[t] == AtBlockBarrier;
      finished += g.state[t] == Finished;
    }
    if (finished == threads) return;
    if (at_barrier > 0 && at_barrier + finished == threads) {
      if (finished > 0) die("__syncthreads reached by only part of the block");
      for (unsigned t = 0; t < threads; ++t) g.state[t] = Runnable;
      continue;
    }
    if (!progress) die("deadlock: a barrier or shuffle that not all its threads reach");
  }
}

// kernel<<<grid, block, shmem, stream>>>(args) becomes launch(grid, block, shmem, stream,
// [&] { kernel(args); }) (translate.py). Runs the whole grid before returning; an invalid
// configuration is reported through cudaGetLastError, as on a GPU.
template <class F>
void launch(dim3 grid, dim3 block, size_t shmem, void* /*stream*/, F&& body) {
  if (grid.x == 0 || grid.x > 2147483647u || grid.y != 1 || grid.z != 1 || block.x == 0 ||
      block.x > 1024 || block.y != 1 || block.z != 1 || shmem > 48 * 1024) {
    g_last_error = 9;  // cudaErrorInvalidConfiguration
    return;
  }
  gridDim = grid;
  blockDim = block;
  g.body = std::function<void()>(body);
  for (unsigned b = 0; b < grid.x; ++b) {
    blockIdx.x = b;
    run_block(block.x);
  }
  threadIdx = uint3{};
  blockIdx = uint3{};
}

}  // namespace emu

// ---------------------------------------------------------------- device intrinsics
inline void __syncthreads() {
  emu::g.state[emu::g.cur] = emu::AtBlockBarrier;
  emu::yield_to_scheduler();
}
inline void __threadfence() {}
inline void __threadfence_system() {}

template <class T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  static_assert(sizeof(T) <= 8, "shuffles of up to 8 bytes");
  if (mask != 0xffffffffu || width != 32) emu::die("only full-warp shuffles are emulated");
  if (blockDim.x % 32 != 0) emu::die("shuffle in a block that is not whole warps");
  unsigned warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  emu::g.warp_slots[warp * 32 + lane] = bits;
  emu::g.state[emu::g.cur] = emu::AtWarpBarrier;
  emu::yield_to_scheduler();  // every lane has written its value
  uint64_t other = emu::g.warp_slots[warp * 32 + (lane ^ unsigned(lane_mask))];
  emu::g.state[emu::g.cur] = emu::AtWarpBarrier;
  emu::yield_to_scheduler();  // every lane has read before any lane writes again
  T r;
  std::memcpy(&r, &other, sizeof(T));
  return r;
}

inline int atomicCAS(int* p, int compare, int value) {
  int old = *p;
  if (old == compare) *p = value;
  return old;
}
inline double __longlong_as_double(long long x) {
  double d;
  std::memcpy(&d, &x, sizeof d);
  return d;
}
// CUDA's math headers provide integer min() in device code.
inline int min(int a, int b) {
  return a < b ? a : b;
}
inline unsigned min(unsigned a, unsigned b) {
  return a < b ? a : b;
}
inline long min(long a, long b) {
  return a < b ? a : b;
}
inline long long min(long long a, long long b) {
  return a < b ? a : b;
}
