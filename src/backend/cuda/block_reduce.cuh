// Warp and block reductions for the CUDA kernels (device code only).
//
// A warp reduction is a butterfly: at step o every lane combines its value with lane (id ^ o)'s,
// for o = 16, 8, 4, 2, 1, so after five steps every lane holds the combination of all 32. The
// order of the combinations is fixed, so results are deterministic run to run.
//
// A block reduction reduces each warp, parks the 32 (at most) warp results in shared memory,
// and lets every warp reduce those, so every thread returns the block's result without a third
// barrier. Requirements: blockDim.x is a multiple of 32 (at most 1024), and every thread of the
// block calls it (it contains __syncthreads and full-warp shuffles).
#pragma once
#include <cuda_runtime.h>

namespace freight::cuda {

struct SumOp {
  template <class T>
  __device__ __forceinline__ T operator()(T a, T b) const {
    return a + b;
  }
};

// fmax semantics: a NaN operand is ignored (softmax rows with a NaN still come out all NaN,
// through the sum of exponentials).
struct MaxOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
  __device__ __forceinline__ double operator()(double a, double b) const { return fmax(a, b); }
};

template <class T, class Op>
__device__ __forceinline__ T warp_reduce(T v, Op op) {
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// `scratch` is a __shared__ array of 32 T owned by the caller; `identity` fills the slots of
// warps the block does not have.
template <class T, class Op>
__device__ __forceinline__ T block_reduce(T v, T identity, Op op, T* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_reduce(v, op);
  __syncthreads();  // everyone has read scratch from a previous call before it is overwritten
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T r = lane < warps ? scratch[lane] : identity;
  return warp_reduce(r, op);
}

}  // namespace freight::cuda
