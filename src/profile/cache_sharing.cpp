// measure_cache_sharing (freight/peaks.h): whether two threads of the pool hand data to each other
// through a shared cache. Each thread writes a block of its own, then reads its own block back
// and the other thread's; the blocks are larger than a core's L1 and L2, so with a shared L3 both
// reads come from it at about the same rate, and without one the other thread's block comes from
// the other core's cache at a fraction of that rate.
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "freight/peaks.h"
#include "freight/runtime.h"

namespace freight {
namespace {

// Bytes per thread: four times Zen 4's 1 MiB L2, a quarter of a 32 MiB L3.
constexpr int64_t kBlockBytes = int64_t(4) << 20;
// Rounds, the first not counted: in a process's first call it ran at a fraction of the rate
// (the pool's threads just started, the pages just mapped) and put the ratio anywhere.
constexpr int kRounds = 5;

void write_block(uint64_t* p, int64_t words, uint64_t v) {
  for (int64_t i = 0; i < words; ++i) p[i] = v + uint64_t(i);
}

// One word of every 64-byte line, in four independent sums: the lines' arrival sets the pace, not
// the loads and additions (reading every word at the baseline's 16-byte width halved the rate).
uint64_t read_block(const uint64_t* p, int64_t words) {
  uint64_t a = 0, b = 0, c = 0, d = 0;
  for (int64_t i = 0; i + 32 <= words; i += 32)
    a += p[i], b += p[i + 8], c += p[i + 16], d += p[i + 24];
  return a + b + c + d;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

bool CacheSharing::shared() const {
  return !measured || ratio() >= kSharedCacheRatio;
}

std::string CacheSharing::describe() const {
  if (!measured) return "not measured (one thread)";
  return fmt::format(
      "{} (a thread reads the other's data at {:.2f}x its own rate: {:.0f} against "
      "{:.0f} GB/s)",
      shared() ? "shared" : "apart", ratio(), cross_bytes_per_s / 1e9, own_bytes_per_s / 1e9);
}

CacheSharing measure_cache_sharing() {
  CacheSharing r;
  if (omp_in_parallel() || num_threads() < 2 || omp_get_num_procs() < 2) return r;
  const int64_t words = kBlockBytes / int64_t(sizeof(uint64_t));
  // Not zeroed: every round writes both blocks before reading them.
  std::unique_ptr<uint64_t[]> blocks(new uint64_t[size_t(2 * words)]);
  // own[t][round], cross[t][round]: each thread's read times.
  std::vector<double> own(2 * kRounds), cross(2 * kRounds);
  uint64_t sums[2] = {0, 0};  // each thread's, read after the region so the reads are kept
  int team = 0;
#pragma omp parallel num_threads(2)
  {
    const int t = omp_get_thread_num();
#pragma omp single
    team = omp_get_num_threads();
    if (team == 2) {
      uint64_t* mine = blocks.get() + t * words;
      const uint64_t* other = blocks.get() + (1 - t) * words;
      for (int round = 0; round < kRounds; ++round) {
        write_block(mine, words, uint64_t(round));
#pragma omp barrier
        auto t0 = std::chrono::steady_clock::now();
        uint64_t s = read_block(mine, words);
        own[t * kRounds + round] = seconds_since(t0);
#pragma omp barrier
        write_block(mine, words, uint64_t(round) + 7);  // the lines are this thread's again
#pragma omp barrier
        t0 = std::chrono::steady_clock::now();
        s += read_block(other, words);
        cross[t * kRounds + round] = seconds_since(t0);
        sums[t] += s;
#pragma omp barrier
      }
    }
  }
  if (team != 2) return r;
  volatile uint64_t keep = sums[0] ^ sums[1];
  (void)keep;
  // Each round counts at its slower thread; the fastest round is kept (a round that the host
  // interrupted does not move it).
  double own_s = 1e30, cross_s = 1e30;
  for (int round = 1; round < kRounds; ++round) {
    own_s = std::min(own_s, std::max(own[round], own[kRounds + round]));
    cross_s = std::min(cross_s, std::max(cross[round], cross[kRounds + round]));
  }
  r.measured = true;
  r.own_bytes_per_s = double(kBlockBytes) / std::max(own_s, 1e-9);
  r.cross_bytes_per_s = double(kBlockBytes) / std::max(cross_s, 1e-9);
  return r;
}

}  // namespace freight
