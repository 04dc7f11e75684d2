// Per-channel sums over a tensor viewed as [n, c, s] (batch norm's statistics and gradients, a
// convolution's bias gradient), split over many blocks so that a few channels still fill a
// large GPU: a first launch gives each block one part (a contiguous range of the channel's n·s
// elements) and writes the part's sums; a second combines each channel's parts in part order.
// The split depends only on the shape, and every sum has a fixed order (block_reduce within a
// part, part order across parts), so results are reproducible run to run and between eager
// steps and graph replays; there are no atomics.
#pragma once
#include <cstdint>

#include "backend/cuda/block_reduce.cuh"

namespace freight::cuda {

// Offset of element q of channel ch in the [n, c, s] layout.
__host__ __device__ __forceinline__ int64_t channel_offset(int64_t q, int64_t ch, int64_t c,
                                                           int64_t s) {
  return ((q / s) * c + ch) * s + q % s;
}

struct ChannelSplit {
  int64_t parts = 1;  // blocks per channel
  int64_t chunk = 1;  // elements per part (the last part may have fewer)
};

// About kTargetBlocks blocks in all (several per SM of the largest GPUs), but never fewer than
// kMinPerThread elements per thread of a part, so small channels stay in one block.
inline ChannelSplit channel_split(int64_t channels, int64_t m, unsigned threads) {
  constexpr int64_t kTargetBlocks = 1024, kMinPerThread = 4;
  ChannelSplit sp;
  if (channels <= 0 || m <= 0) return sp;
  int64_t want = (kTargetBlocks + channels - 1) / channels;
  int64_t most = m / (int64_t(threads) * kMinPerThread);
  sp.parts = want < most ? want : most;
  if (sp.parts < 1) sp.parts = 1;
  sp.chunk = (m + sp.parts - 1) / sp.parts;
  sp.parts = (m + sp.chunk - 1) / sp.chunk;
  return sp;
}

}  // namespace freight::cuda
