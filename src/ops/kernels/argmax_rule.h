// The argmax rule of argmax_axis and of the training metrics' accuracy, shared by the CPU and
// CUDA kernels so that both pick the same element: torch.argmax's. Scanning the axis in order, a
// later element replaces the best so far when it is larger, or when it is NaN and the best is
// not: the first maximum wins a tie, and a NaN counts as larger than everything (the first NaN
// wins). Host and device code.
#pragma once

#if defined(__CUDACC__)
#define FREIGHT_ARGMAX_HD __host__ __device__ __forceinline__
#else
#define FREIGHT_ARGMAX_HD inline
#endif

namespace freight {

template <class T>
FREIGHT_ARGMAX_HD bool argmax_replaces(T v, T best) {
  return v > best || (v != v && best == best);  // (v != v: v is NaN; integers never are)
}

}  // namespace freight
