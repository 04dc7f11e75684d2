// measure_all_reduce (freight/dist.h): the link between the ranks as data parallelism uses it.
#include <algorithm>
#include <chrono>
#include <memory>

#include "dist/communicator.h"
#include "dist/device_sums.h"
#include "freight/dist.h"
#include "freight/runtime.h"
#include "freight/tensor.h"

namespace freight::dist {

std::vector<AllReduceTiming> measure_all_reduce(const std::vector<int64_t>& sizes_bytes,
                                                Device device) {
  const WorldInfo& w = world();
  std::vector<AllReduceTiming> out;
  if (w.size <= 1) return out;
  const double p = w.size;
  // On a GPU: NCCL's sums of device memory, each timed until the device has finished it.
  std::unique_ptr<RankSums> device_sums;
  if (!device.is_cpu()) device_sums = device_rank_sums(device);
  for (int64_t bytes : sizes_bytes) {
    int64_t n = std::max<int64_t>(1, bytes / 4);
    std::vector<float> buf(device.is_cpu() ? size_t(n) : 0, 1.0f);
    Tensor on_device = device.is_cpu() ? Tensor() : Tensor::ones({n}, DType::F32, device);
    // Fewer repeats for large sums: the same on every rank (a function of the size alone).
    const int repeats = bytes >= (int64_t(16) << 20) ? 5 : bytes >= (int64_t(1) << 20) ? 10 : 30;
    std::vector<double> times;
    AsyncSums sums;
    for (int i = -2; i < repeats; ++i) {
      if (device_sums) synchronize(device);
      barrier("the all-reduce measurement");
      auto t0 = std::chrono::steady_clock::now();
      if (device_sums) {
        device_sums->start(on_device.data_ptr(), n, DType::F32);
        device_sums->finish("the all-reduce measurement");
        synchronize(device);
      } else {
        sums.start(buf.data(), n, DType::F32);
        sums.finish("the all-reduce measurement");
      }
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
