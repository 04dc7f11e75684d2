// CPU emulation of the part of CUDA that Freight's kernels use: execution-space keywords,
// thread and block indices, launches, __syncthreads, warp shuffles and a few intrinsics. A
// verification aid for machines without a GPU (README.md), never linked into the engine.
//
// Blocks run one after another. The threads of a block are fibers (emu_fiber.h) on one OS
// thread; a thread runs until it reaches a barrier or returns. __syncthreads is released when
// every thread of the block is waiting at it (a thread that returns first is reported as a
// divergent barrier), a shuffle when all 32 lanes of its warp are waiting (a shuffle that not
// every lane reaches is reported as a deadlock). Two schedules: lockstep (each pass moves every
// warp one barrier further) and, with EMU_SERIAL set, serial (a warp runs through all its own
// shuffles before the next warp moves), which exposes missing block barriers around shared
// memory. Warps are visited in a pseudo-random order in both, and the lanes of a warp in a
// fresh pseudo-random order each time they are resumed. __shared__ arrays are refilled with
// garbage for each block (poison_shared).
//
// A launch is queued on its stream, or recorded into the graph its stream is capturing, and its
// grid runs when the stream gets to it (emu_streams.h).
#pragma once
#include "emu_fiber.h"
#include "emu_streams.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static  // blocks run one at a time, so one static array per kernel suffices

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>
#include <type_traits>
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
  std::vector<Fiber> fibers;  // one per thread of the block
  std::vector<State> state;
  Fiber main;  // the host thread that runs the grid
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

// A thread's whole life: the kernel body, then back to the scheduler for good (the fiber is
// restarted from scratch for the next block).
[[noreturn]] inline void thread_entry() {
  const void* bottom = nullptr;
  size_t size = 0;
  fiber_arrived(&bottom, &size);
  if (bottom) g.main.bottom = bottom, g.main.size = size;
  g.body();
  g.state[g.cur] = Finished;
  fiber_switch(g.fibers[g.cur], g.main, /*from_exits=*/true);
  die("a finished thread was resumed");
}

inline void yield_to_scheduler() {
  fiber_switch(g.fibers[g.cur], g.main);
}

// The warp schedule (EMU_SERIAL), and the order of the blocks; the race check (emu_racecheck.h)
// runs a grid a second time with both turned round.
inline bool g_serial = std::getenv("EMU_SERIAL") != nullptr;
inline bool g_reverse_blocks = false;
inline bool serial_schedule() {
  return g_serial;
}

// Runs thread t until it blocks or returns.
inline void step(unsigned t) {
  g.cur = t;
  threadIdx.x = t;
  fiber_switch(g.main, g.fibers[t]);
}

// Blocks run so far, all launches together: a block's identity for poison_shared.
inline uint64_t g_block_serial = 0;

// __shared__ arrays are static here (one block runs at a time), so a block would find what the
// previous block left in them; on a GPU it finds garbage. translate.py calls this after every
// __shared__ declaration: the first thread of a block to get there fills the array with 0xFF
// bytes (NaN as float or double, -1 as an integer); the block's other threads reach it later
// and leave it alone. A kernel that reads a slot its block never wrote then fails its test.
inline void poison_shared(void* p, size_t n) {
  static std::map<void*, uint64_t> poisoned_in;  // array -> the block that last poisoned it
  uint64_t& last = poisoned_in[p];
  if (last == g_block_serial + 1) return;
  last = g_block_serial + 1;
  std::memset(p, 0xFF, n);
}

inline void run_block(unsigned threads) {
  ++g_block_serial;
  if (g.fibers.size() < threads) {
    g.fibers.resize(threads);
    for (auto& f : g.fibers)
      if (f.stack.empty()) f.stack.resize(128 * 1024);
  }
  g.state.assign(threads, Runnable);
  for (unsigned t = 0; t < threads; ++t) fiber_start(g.fibers[t], thread_entry);
  static uint64_t rng = 88172645463325252ull;  // xorshift64
  auto next = [] {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
  };
  unsigned warps = (threads + 31) / 32;
  std::vector<unsigned> order(warps);
  unsigned lanes[32];
  for (;;) {
    for (unsigned w = 0; w < warps; ++w) order[w] = w;
    for (unsigned w = warps; w > 1; --w) std::swap(order[w - 1], order[next() % w]);
    bool progress = false;
    for (unsigned w : order) {
      unsigned lo = w * 32, hi = lo + 32 < threads ? lo + 32 : threads;
      for (;;) {
        // The lanes of a warp in a fresh random order each time: code that needs lane 0's
        // write before lane 5's read without a barrier or a shuffle between them fails in some
        // order (a GPU gives no order either).
        unsigned n = hi - lo;
        for (unsigned i = 0; i < n; ++i) lanes[i] = lo + i;
        for (unsigned i = n; i > 1; --i) std::swap(lanes[i - 1], lanes[next() % i]);
        bool ran = false;
        for (unsigned i = 0; i < n; ++i)
          if (g.state[lanes[i]] == Runnable) step(lanes[i]), ran = true;
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

// The <<<...>>> configuration; shmem and stream may be left out, as in CUDA.
struct Config {
  dim3 grid, block;
  size_t shmem;
  void* stream;
  Config(dim3 g, dim3 b, size_t sh = 0, void* st = nullptr)
      : grid(g), block(b), shmem(sh), stream(st) {}
};

// Threads run by all launches so far: a measure of a kernel's work that tests can bound
// (tests/cuda/emulation_checks_test.cpp).
inline std::atomic<uint64_t> g_threads_run{0};
inline std::atomic<uint64_t> g_blocks_run{0};

// Called after each block, and by each atomic, while a race check watches a launch
// (emu_racecheck.h).
inline std::function<void(unsigned)> g_after_block;
inline std::function<void(const void*, size_t)> g_atomic_bytes;

inline void run_grid(dim3 grid, dim3 block, std::function<void()> body) {
  g_threads_run += uint64_t(grid.x) * block.x;
  g_blocks_run += grid.x;
  gridDim = grid;
  blockDim = block;
  g.body = std::move(body);
  for (unsigned i = 0; i < grid.x; ++i) {
    blockIdx.x = g_reverse_blocks ? grid.x - 1 - i : i;
    run_block(block.x);
    if (g_after_block) g_after_block(blockIdx.x);
  }
  threadIdx = uint3{};
  blockIdx = uint3{};
}

// kernel<<<grid, block, shmem, stream>>>(args) becomes launch(Config(grid, block, shmem,
// stream), [=](auto&&... a) { kernel(a...); }, args) (translate.py). The arguments are copied
// now, as a launch does. An invalid configuration is reported through cudaGetLastError, as on a
// GPU; otherwise the grid runs when its stream gets to it (or at each launch of the graph it was
// captured into).
// Runs a launched grid (emu_racecheck.h): once, or twice and compared under EMU_RACECHECK.
// `words` are the 8-byte words of the arguments: the pointers among them say what the kernel
// can reach.
inline void run_launch(dim3 grid, dim3 block, std::function<void()>& body, const char* name,
                       const std::vector<uint64_t>& words);

template <class T>
void argument_words(const T& arg, std::vector<uint64_t>& words) {
  if constexpr (sizeof(T) >= 8 && alignof(T) >= 8) {
    for (size_t at = 0; at + 8 <= sizeof(T); at += 8) {
      uint64_t w;
      std::memcpy(&w, reinterpret_cast<const char*>(&arg) + at, 8);
      if (w) words.push_back(w);
    }
  }
}

template <class F, class... A>
void launch(const Config& c, const char* name, F call, A&&... args) {
  if (c.grid.x == 0 || c.grid.x > 2147483647u || c.grid.y != 1 || c.grid.z != 1 || c.block.x == 0 ||
      c.block.x > 1024 || c.block.y != 1 || c.block.z != 1 || c.shmem > 48 * 1024) {
    g_last_error = 9;  // cudaErrorInvalidConfiguration
    return;
  }
  auto tup = std::make_tuple(std::decay_t<A>(std::forward<A>(args))...);
  std::vector<uint64_t> words;
  std::apply([&](const auto&... a) { (argument_words(a, words), ...); }, tup);
  std::function<void()> bound = [call, tup]() mutable { std::apply(call, tup); };
  dim3 grid = c.grid, block = c.block;
  enqueue(
      c.stream,
      [grid, block, bound, name, words]() mutable { run_launch(grid, block, bound, name, words); },
      name);
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

namespace emu {
// Atomics (blocks run one at a time, so they are atomic here) tell the race check which bytes
// several blocks may write.
inline void note_atomic(const void* p, size_t n) {
  if (g_atomic_bytes) g_atomic_bytes(p, n);
}
}  // namespace emu
inline double atomicAdd(double* p, double v) {
  emu::note_atomic(p, sizeof *p);
  double old = *p;
  *p = old + v;
  return old;
}
inline float __fmaf_rn(float a, float b, float c) {
  return std::fma(a, b, c);
}
inline double __dmul_rn(double a, double b) {  // a product that is never fused
  volatile double r = a * b;
  return r;
}
inline int atomicCAS(int* p, int compare, int value) {
  emu::note_atomic(p, sizeof *p);
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
