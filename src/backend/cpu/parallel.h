// Parallel loops over the shared OpenMP pool (the BLAS uses the same pool, so our kernels and
// its GEMMs never oversubscribe the cores). Small loops run inline: a parallel region costs a
// couple of microseconds, more than a few thousand elementwise operations.
#pragma once
#include <omp.h>

#include <algorithm>
#include <cstdint>

#include "freight/parallel_thresholds.h"

namespace freight::cpu {

// Elements each thread of an elementwise loop gets at least: measured per machine by `freight
// devices --measure` (freight/parallel_thresholds.h).
inline int64_t elementwise_grain() {
  return parallel_thresholds().elementwise_per_thread;
}

// Calls fn(begin, end) over [0, n) split into contiguous chunks, one per thread, each of at
// least `grain` items.
template <class Fn>
void parallel_for(int64_t n, int64_t grain, Fn&& fn) {
  if (n <= 0) return;
  int max_threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  int64_t chunks = std::min<int64_t>(max_threads, (n + grain - 1) / std::max<int64_t>(grain, 1));
  if (chunks <= 1) {
    fn(int64_t(0), n);
    return;
  }
#pragma omp parallel num_threads(int(chunks))
  {
    int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    int64_t begin = n * t / nt, end = n * (t + 1) / nt;
    if (begin < end) fn(begin, end);
  }
}

}  // namespace freight::cpu
