// Sums of device buffers over the ranks of a data-parallel job, on NCCL (DeviceBackend::rank_sums
// of the CUDA backend). Host code.
#pragma once
#include <memory>

#include "core/backend.h"

namespace freight::cuda {

// Makes `device` current, sets up an NCCL communicator of setup.size ranks (rank 0's id reaches
// the others through setup.broadcast_from_rank0) and a stream for its sums. A collective. In a
// build without NCCL it throws, saying so.
std::unique_ptr<RankSums> make_nccl_sums(int device, const RankSumsSetup& setup);

}  // namespace freight::cuda
