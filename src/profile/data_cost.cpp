// What a dataset costs the training loop (freight/explain.h's DataCost): the one-off load of the
// training split and the Loader's time per batch, measured the way `freight train` loads and
// batches it.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "freight/data/loader.h"
#include "freight/error.h"
#include "freight/explain.h"
#include "freight/training.h"

namespace freight {

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

DataCost measure_data_cost(const std::string& data, const nn::ModelSpec& spec, int64_t batch_size,
                           uint64_t seed) {
  DataCost c;
  c.data = data;
  auto t0 = std::chrono::steady_clock::now();
  data::Dataset ds = load_dataset(data, "train", spec);
  c.load_s = seconds_since(t0);
  c.samples = ds.size();
  c.notes = ds.notes;
  FREIGHT_CHECK(c.samples > 0, fmt::format("--data {}: the training split is empty", data));
  data::LoaderOptions lo;
  lo.batch_size = batch_size;
  lo.seed = seed;
  std::tie(lo.mean, lo.std) = dataset_normalisation(data);
  lo.prefetch = 0;  // each batch made on this thread when asked for: its own time, not a wait
  data::Loader loader(ds, lo);
  loader.start_epoch(0);
  std::vector<double> times;
  data::Batch b;
  for (int i = 0; i < 20; ++i) {
    t0 = std::chrono::steady_clock::now();
    if (!loader.next(b)) break;
    times.push_back(seconds_since(t0));
  }
  c.batches_timed = int64_t(times.size());
  std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
  c.batch_s = times[times.size() / 2];
  return c;
}

}  // namespace freight
