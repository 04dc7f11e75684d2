// The device backend's sums over the ranks of this job (NCCL on a GPU), set up for this world:
// its rank and size, the collectives' timeout, and rank 0's communicator id sent over MPI.
#pragma once
#include <memory>

#include "core/backend.h"
#include "freight/device.h"

namespace freight::dist {

// A collective: every rank calls it, each with its own device.
std::unique_ptr<RankSums> device_rank_sums(Device device);

}  // namespace freight::dist
