// measure_all_reduce (freight/dist.h): the link between the ranks as data parallelism uses it.
#include <algorithm>
#include <chrono>

#include "dist/communicator.h"
#include "freight/dist.h"

namespace freight::dist {

std::vector<AllReduceTiming> measure_all_reduce(const std::vector<int64_t>& sizes_bytes) {
  const WorldInfo& w = world();
  std::vector<AllReduceTiming> out;
  if (w.size <= 1) return out;
  const double p = w.size;
  for (int64_t bytes : sizes_bytes) {
    int64_t n = std::max<int64_t>(1, bytes / 4);
    std::vector<float> buf(size_t(n), 1.0f);
    // Fewer repeats for large sums: the same on every rank (a function of the size alone).
    const int repeats = bytes >= (int64_t(16) << 20) ? 5 : bytes >= (int64_t(1) << 20) ? 10 : 30;
    std::vector<double> times;
    AsyncSums sums;
    for (int i = -2; i < repeats; ++i) {
      barrier("the all-reduce measurement");
      auto t0 = std::chrono::steady_clock::now();
      sums.start(buf.data(), n, DType::F32);
      sums.finish("the all-reduce measurement");
      double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (i >= 0) times.push_back(t);
    }
    all_reduce_max(times, "the all-reduce measurement");  // each repeat: its slowest rank
    std::sort(times.begin(), times.end());
    double median = times[times.size() / 2];
    out.push_back({n * 4, median, 2 * (p - 1) / p * double(n * 4) / median});
  }
  return out;
}

}  // namespace freight::dist
