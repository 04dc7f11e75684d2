#include "bench/cache_reruns.h"

#include <chrono>
#include <thread>

namespace freight::bench {

bool SharedRun::apart() const {
  return (start.measured && !start.shared()) || (end.measured && !end.shared());
}

SharedRun run_with_shared_caches(const RerunOptions& o, const std::function<void()>& run,
                                 const std::function<CacheSharing()>& probe) {
  const auto read = [&] { return probe ? probe() : measure_cache_sharing(); };
  SharedRun r;
  r.start = read();
  for (;;) {
    run();
    ++r.runs;
    if (!r.start.measured) return r;
    r.end = read();
    if (!r.apart() || r.runs > o.reruns) return r;
    // Wait for the host to put the threads back together before the next run.
    using clock = std::chrono::steady_clock;
    const auto until = clock::now() + std::chrono::duration<double>(o.wait_seconds);
    for (r.start = read(); !r.start.shared() && clock::now() < until; r.start = read())
      std::this_thread::sleep_for(std::chrono::duration<double>(o.poll_seconds));
  }
}

}  // namespace freight::bench
