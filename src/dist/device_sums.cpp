#include "dist/device_sums.h"

#include "dist/communicator.h"
#include "freight/dist.h"

namespace freight::dist {

std::unique_ptr<RankSums> device_rank_sums(Device device) {
  const WorldInfo& w = world();
  RankSumsSetup setup;
  setup.rank = w.rank;
  setup.size = w.size;
  setup.timeout_seconds = timeout_seconds();
  setup.broadcast_from_rank0 = [](void* data, size_t bytes) {
    broadcast_bytes(data, bytes, 0, "the broadcast of rank 0's NCCL id");
  };
  return backend_for(device.type).rank_sums(device.index, setup);
}

}  // namespace freight::dist
