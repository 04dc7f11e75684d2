// Rerunning a benchmark row whose threads did not share a cache (freight/peaks.h's
// CacheSharing). On a virtual machine whose host moves the vCPUs between sharing a cache and
// sitting apart, a row timed while they were apart measures the host's placement more than the
// code (the mlp at batch 1 on two threads of the 2-vCPU EPYC: about 1 ms apart, 0.13 ms shared).
// `freight bench --rerun-apart N` repeats such a row, Freight's and PyTorch's alike, so that both
// sides of a comparison are timed in the same state.
#pragma once
#include <functional>
#include <limits>

#include "freight/peaks.h"

namespace freight::bench {

// The readings around the run that was kept, and how many runs the row took.
struct SharedRun {
  CacheSharing start, end;
  // The lowest ratio (CacheSharing::ratio) read during the kept run, its start and end included;
  // infinity when nothing was read.
  double lowest = std::numeric_limits<double>::infinity();
  int runs = 0;
  // Whether a reading said apart.
  bool apart() const { return lowest < kSharedCacheRatio; }
};

struct RerunOptions {
  int reruns = 0;            // more runs at most after the first, while a run was apart
  double wait_seconds = 30;  // before a rerun, how long to wait for a shared reading at most
  double poll_seconds = 0.5;
};

// Runs `run` with a cache-sharing reading from `probe` (measure_cache_sharing by default) before
// and after it; `run` is handed `read_now`, which takes one more reading (between a row's timed
// rounds: the host can move the vCPUs within a row). While a reading said apart and reruns are
// left, waits (polling `probe`) until it says shared or `wait_seconds` pass, and runs `run`
// again; the last run's readings are returned. With an unmeasured first reading (one thread)
// `run` runs once and nothing more is read.
using ReadNow = std::function<void()>;
SharedRun run_with_shared_caches(const RerunOptions& o,
                                 const std::function<void(const ReadNow& read_now)>& run,
                                 const std::function<CacheSharing()>& probe = {});

}  // namespace freight::bench
