#include "bench/cache_reruns.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <thread>

namespace freight::bench {

SharedRun run_with_shared_caches(const RerunOptions& o,
                                 const std::function<void(const ReadNow& read_now)>& run,
                                 const std::function<CacheSharing()>& probe) {
  const auto read = [&] { return probe ? probe() : measure_cache_sharing(); };
  SharedRun r;
  const auto note = [&](const CacheSharing& c) {
    if (c.measured) r.lowest = std::min(r.lowest, c.ratio());
  };
  r.start = read();
  for (;;) {
    r.lowest = std::numeric_limits<double>::infinity();
    note(r.start);
    run([&] {
      if (r.start.measured) note(read());
    });
    ++r.runs;
    if (!r.start.measured) return r;
    r.end = read();
    note(r.end);
    if (!r.apart() || r.runs > o.reruns) return r;
    // Wait for the host to put the threads back together before the next run.
    using clock = std::chrono::steady_clock;
    const auto until = clock::now() + std::chrono::duration<double>(o.wait_seconds);
    for (r.start = read(); !r.start.shared() && clock::now() < until; r.start = read())
      std::this_thread::sleep_for(std::chrono::duration<double>(o.poll_seconds));
  }
}

}  // namespace freight::bench
