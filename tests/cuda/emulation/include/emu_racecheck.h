// The race check of the CPU emulation (EMU_RACECHECK=1; ../README.md).
//
// A kernel without a race computes the same bytes whatever order its blocks, warps and lanes
// run in. With EMU_RACECHECK set, each launch runs twice from the same memory: once in the
// configured warp schedule with the blocks in order, once in the other schedule (lockstep or
// serial) with the blocks in reverse and fresh lane orders; the device memory the kernel can
// reach must come out byte for byte the same. A block that reads what another block writes, two
// blocks writing one address, or threads of a block that share memory without the barrier that
// orders them, show up as a difference in some pair of orders, reported with the kernel's name
// and the first differing address. What the kernel can reach: the device and page-locked blocks
// its arguments point into, and the blocks that small device blocks among those point to
// (pointer tables). Launches reaching more than EMU_RACECHECK_MAX_MB (default 16) or memory that
// AddressSanitizer poisons (the rounded allocator's slack) run once and are counted as unchecked.
// Page-locked memory (the deferred-error record, where the first reporter wins) is restored
// between the runs but not compared.
//
// During the first run, when grid size times reached memory is at most EMU_RACECHECK_BLOCK_MB
// (default 1024), the device memory is also compared after every block, and a byte changed by
// two different blocks, not through an atomic, is reported as a write-write race between blocks
// (blocks never interleave here, so a read-modify-write of one address by several blocks gives
// the same result in every order, and only this finds it).
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#include "emu_core.h"

namespace emu {

inline int g_racecheck_override = -1;  // 0 or 1 overrides EMU_RACECHECK (the emulation's tests)
inline bool racecheck_enabled() {
  static const bool on = [] {
    const char* e = std::getenv("EMU_RACECHECK");
    return e && std::strcmp(e, "0") != 0;
  }();
  return g_racecheck_override >= 0 ? g_racecheck_override == 1 : on;
}
inline size_t racecheck_limit() {
  static const size_t limit = [] {
    const char* e = std::getenv("EMU_RACECHECK_MAX_MB");
    return size_t(e ? std::strtoull(e, nullptr, 10) : 16) << 20;
  }();
  return limit;
}
inline std::atomic<uint64_t> g_racechecked_launches{0}, g_unchecked_launches{0},
    g_block_tracked_launches{0};
// What the check covered, printed when the program ends.
struct RacecheckSummary {
  ~RacecheckSummary() {
    if (!racecheck_enabled()) return;
    std::fprintf(stderr,
                 "CUDA emulation race check: %llu launches run twice and compared (%llu of them "
                 "with per-block write tracking), %llu unchecked (over EMU_RACECHECK_MAX_MB, or "
                 "reaching poisoned memory)\n",
                 (unsigned long long)g_racechecked_launches.load(),
                 (unsigned long long)g_block_tracked_launches.load(),
                 (unsigned long long)g_unchecked_launches.load());
  }
};
inline RacecheckSummary g_racecheck_summary;

struct Reached {
  Range r;
  bool device;
};

inline std::vector<Reached> reachable(const std::vector<uint64_t>& words) {
  std::vector<Reached> out;
  std::vector<uint64_t> inner;
  std::lock_guard<std::mutex> lock(g_mem_mu);
  auto add = [&](uint64_t w, bool scan_tables) {
    Range r;
    const void* p = reinterpret_cast<const void*>(w);
    bool device = block_of(g_device_blocks, p, &r);
    if (!device && !block_of(g_pinned_blocks, p, &r)) return;
    for (const Reached& e : out)
      if (e.r.p == r.p) return;
    out.push_back({r, device});
    if (!scan_tables || !device || r.n > 4096) return;
#ifdef EMU_ALLOCATOR_ASAN
    if (__asan_region_is_poisoned(r.p, r.n)) return;
#endif
    for (size_t at = 0; at + 8 <= r.n; at += 8) {
      uint64_t v;
      std::memcpy(&v, r.p + at, 8);
      if (v) inner.push_back(v);
    }
  };
  for (uint64_t w : words) add(w, true);
  for (uint64_t w : inner) add(w, false);
  return out;
}

inline size_t racecheck_block_budget() {
  static const size_t budget = [] {
    const char* e = std::getenv("EMU_RACECHECK_BLOCK_MB");
    return size_t(e ? std::strtoull(e, nullptr, 10) : 1024) << 20;
  }();
  return budget;
}

// Per-block write tracking for one launch (see the top of this file).
struct BlockWrites {
  std::vector<Range> mem;       // the reached device blocks
  std::vector<char> prev;       // their bytes after the previous block
  std::vector<int32_t> writer;  // the block that last changed each byte, or -1
  std::vector<char> atomic;     // bytes some atomic touched
  const char* name = "";
  long offset_of(const char* p) const {
    size_t at = 0;
    for (const Range& r : mem) {
      if (p >= r.p && p < r.p + r.n) return long(at + size_t(p - r.p));
      at += r.n;
    }
    return -1;
  }
};
inline BlockWrites g_block_writes;

inline void watch_blocks(dim3 grid, const std::vector<Reached>& reach, const char* name) {
  BlockWrites& w = g_block_writes;
  w.mem.clear();
  size_t total = 0;
  for (const Reached& e : reach)
    if (e.device) w.mem.push_back(e.r), total += e.r.n;
  if (total == 0 || uint64_t(grid.x) * total > racecheck_block_budget()) return;
  ++g_block_tracked_launches;
  w.name = name;
  w.prev.clear();
  for (const Range& r : w.mem) w.prev.insert(w.prev.end(), r.p, r.p + r.n);
  w.writer.assign(total, -1);
  w.atomic.assign(total, 0);
  g_atomic_bytes = [](const void* p, size_t n) {
    long o = g_block_writes.offset_of(static_cast<const char*>(p));
    for (size_t i = 0; o >= 0 && i < n && size_t(o) + i < g_block_writes.atomic.size(); ++i)
      g_block_writes.atomic[size_t(o) + i] = 1;
  };
  g_after_block = [](unsigned b) {
    BlockWrites& w = g_block_writes;
    size_t at = 0;
    for (const Range& r : w.mem) {
      for (size_t i = 0; i < r.n; i += 64) {
        size_t m = r.n - i < 64 ? r.n - i : 64;
        if (std::memcmp(r.p + i, w.prev.data() + at + i, m) == 0) continue;
        for (size_t j = i; j < i + m; ++j) {
          if (r.p[j] == w.prev[at + j]) continue;
          int32_t& who = w.writer[at + j];
          if (who >= 0 && who != int32_t(b) && !w.atomic[at + j]) {
            std::fprintf(stderr,
                         "CUDA emulation: race in kernel %s: blocks %d and %u both wrote byte "
                         "%zu of the %zu-byte block at %p, not through an atomic (a write-write "
                         "race between blocks; EMU_RACECHECK)\n",
                         w.name, who, b, j, r.n, static_cast<void*>(r.p));
            std::abort();
          }
          who = int32_t(b);
          w.prev[at + j] = r.p[j];
        }
      }
      at += r.n;
    }
  };
}

inline bool poisoned(const Range& r) {
#ifdef EMU_ALLOCATOR_ASAN
  return __asan_region_is_poisoned(r.p, r.n) != nullptr;
#else
  (void)r;
  return false;
#endif
}

inline void run_launch(dim3 grid, dim3 block, std::function<void()>& body, const char* name,
                       const std::vector<uint64_t>& words) {
  if (!racecheck_enabled()) return run_grid(grid, block, body);
  std::vector<Reached> reach = reachable(words);
  size_t total = 0;
  bool clean = true;
  for (const Reached& e : reach) {
    total += e.r.n;
    clean = clean && !poisoned(e.r);
  }
  if (!clean || total > racecheck_limit()) {
    ++g_unchecked_launches;
    return run_grid(grid, block, body);
  }
  ++g_racechecked_launches;
  std::vector<char> start;
  for (const Reached& e : reach) start.insert(start.end(), e.r.p, e.r.p + e.r.n);
  watch_blocks(grid, reach, name);
  run_grid(grid, block, body);
  g_after_block = nullptr;
  g_atomic_bytes = nullptr;
  std::vector<char> first;
  for (const Reached& e : reach) first.insert(first.end(), e.r.p, e.r.p + e.r.n);
  size_t at = 0;
  for (const Reached& e : reach) {
    std::memcpy(e.r.p, start.data() + at, e.r.n);
    at += e.r.n;
  }
  // The second run in the other orders; the work counters count the launch once.
  uint64_t threads = g_threads_run.load(), blocks = g_blocks_run.load();
  g_serial = !g_serial;
  g_reverse_blocks = true;
  run_grid(grid, block, body);
  g_serial = !g_serial;
  g_reverse_blocks = false;
  g_threads_run = threads;
  g_blocks_run = blocks;
  at = 0;
  for (const Reached& e : reach) {
    if (e.device && std::memcmp(e.r.p, first.data() + at, e.r.n) != 0) {
      size_t i = 0;
      while (e.r.p[i] == first[at + i]) ++i;
      std::fprintf(stderr,
                   "CUDA emulation: race in kernel %s (grid %u x %u): byte %zu of the %zu-byte "
                   "block at %p came out 0x%02x with %s warps and blocks in order, 0x%02x with "
                   "%s warps and blocks in reverse (EMU_RACECHECK)\n",
                   name, grid.x, block.x, i, e.r.n, static_cast<void*>(e.r.p),
                   unsigned(uint8_t(first[at + i])), g_serial ? "serial" : "lockstep",
                   unsigned(uint8_t(e.r.p[i])), g_serial ? "lockstep" : "serial");
      std::abort();
    }
    at += e.r.n;
  }
}

}  // namespace emu
