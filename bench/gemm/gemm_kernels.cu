// The CUDA kernels of the GEMM lab: three steps from one thread per output to register tiles,
// the GPU version of the CPU lab's ladder. docs/gemm-lab.md puts them side by side.
//
// The arithmetic is the same in every kernel; what changes is where each operand comes from:
//   (1) naive           every multiply-add reads A and B from global memory (through L1/L2)
//   (2) shared tiles    a block loads a 32×32 tile of A and of B into shared memory once, and
//                       each value is then read 32 times from there
//   (3) register tiles  a thread keeps an 8×8 tile of C in registers; per step of the sum it
//                       reads 8 values of A and 8 of B from shared memory for 64 multiply-adds
// That is the CPU story again: global memory is DRAM, shared memory is L1, registers are
// registers, and each step raises the number of multiply-adds per byte moved.
//
// Grids and blocks are one-dimensional (blockIdx.x enumerates the tiles of C, column tiles
// fastest; threadIdx.x is split into row and column by hand): it keeps every size within the
// grid limits, and it is what the CPU emulation in tests/cuda/emulation runs.
#include <cuda_bf16.h>

#include <algorithm>

#include "gemm_kernels.h"

namespace gemm_lab::cuda {

namespace {

// ------------------------------------------------------------------ (1) naive
// A block is 8 rows × 32 columns of C; the 32 threads of a warp take 32 neighbouring columns
// of one row. So a warp's loads of B are 32 consecutive floats (one 128-byte transaction,
// "coalesced") and its loads of A are one float that all lanes share (a broadcast). Each
// multiply-add still needs one load from the memory system: about 1 flop per 4 bytes, so the
// kernel runs at the speed of L1/L2, far below the arithmetic units.
constexpr int kNaiveCols = 32, kNaiveRows = 8;

__global__ void __launch_bounds__(kNaiveCols* kNaiveRows)
    naive_kernel(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c,
                 int m, int n, int k) {
  const int tiles_n = (n + kNaiveCols - 1) / kNaiveCols;
  const int row = int(blockIdx.x) / tiles_n * kNaiveRows + int(threadIdx.x) / kNaiveCols;
  const int col = int(blockIdx.x) % tiles_n * kNaiveCols + int(threadIdx.x) % kNaiveCols;
  if (row >= m || col >= n) return;
  float sum = 0;
  for (int p = 0; p < k; ++p) sum += a[size_t(row) * k + p] * b[size_t(p) * n + col];
  c[size_t(row) * n + col] = sum;
}

// ------------------------------------------------------------------ (2) shared-memory tiles
// A block of T×T threads computes a T×T tile of C. The sum runs in steps of T: the block copies
// a T×T tile of A and of B into shared memory (each thread one element of each, coalesced),
// waits for everyone (__syncthreads), and every thread then reads a row of the A tile and a
// column of the B tile from shared memory. Each value loaded from global memory is used T times,
// so global traffic drops by a factor of T. Reads of as[ty][p] are the same address for a
// whole warp (broadcast) and reads of bs[p][tx] are 32 consecutive words (one per bank): no bank
// conflicts. The second barrier keeps a fast thread from overwriting a tile that a slow thread is
// still reading. Elements past the edges of A and B load as zeros, which add nothing.
template <int T>
__global__ void __launch_bounds__(T* T)
    smem_kernel(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c,
                int m, int n, int k) {
  __shared__ float as[T][T];
  __shared__ float bs[T][T];
  const int tiles_n = (n + T - 1) / T;
  const int tx = int(threadIdx.x) % T, ty = int(threadIdx.x) / T;
  const int row = int(blockIdx.x) / tiles_n * T + ty;
  const int col = int(blockIdx.x) % tiles_n * T + tx;
  float sum = 0;
  for (int p0 = 0; p0 < k; p0 += T) {
    as[ty][tx] = row < m && p0 + tx < k ? a[size_t(row) * k + p0 + tx] : 0.0f;
    bs[ty][tx] = p0 + ty < k && col < n ? b[size_t(p0 + ty) * n + col] : 0.0f;
    __syncthreads();
#pragma unroll
    for (int p = 0; p < T; ++p) sum += as[ty][p] * bs[p][tx];
    __syncthreads();
  }
  if (row < m && col < n) c[size_t(row) * n + col] = sum;
}

// ------------------------------------------------------------------ (3) register tiles
// Step (2) still does one shared-memory load per multiply-add, and shared memory, although on
// chip, delivers far fewer words per cycle than the FMA units consume. Register blocking fixes
// that exactly as the CPU micro-kernel does: a thread owns an 8×8 tile of C in 64 registers and,
// per step p of the sum, loads 8 values of A and 8 of B (four 16-byte loads) for 64 FMAs.
//
// A block of 256 threads (16×16) covers a 128×128 tile of C. Thread (ty, tx) owns rows
// ty·4 + {0..3} and 64 + ty·4 + {0..3}, and columns tx·4 + {0..3} and 64 + tx·4 + {0..3}: two
// 4-wide halves 64 apart rather than 8 neighbours, so that the 16 lanes reading B from shared
// memory read 16 consecutive 16-byte words (no bank conflicts), and the same for A.
//
// The sum runs in slices of kBK = 8: A[128 × 8] and B[8 × 128] go to shared memory, A
// transposed (as[p][row]) so that a thread's 4 rows are one 16-byte load. Each thread moves one
// float4 of A and one of B per slice (1024 floats each, 256 threads). Shared memory is double
// buffered: while the block computes on slice t, each thread already holds slice t + 1 in
// registers (its global loads are in flight during the FMAs) and stores it into the other buffer
// afterwards, so one __syncthreads per slice suffices: the barrier at the end of slice t − 1
// guarantees that nobody still reads the buffer that slice t + 1 is written into.
//
// kVec selects 16-byte vector loads and stores (float4) for A, B and C: possible when k and n
// are multiples of 4 and the pointers are 16-byte aligned, so that every float4 is aligned and
// lies either wholly inside or wholly outside the matrix. Otherwise every element is loaded on
// its own, with its own bounds check.
constexpr int kBM = 128, kBN = 128, kBK = 8, kThreads = 256;

template <bool kVec>
__device__ __forceinline__ void load_a_slice(const float* __restrict__ a, int m, int k, int row0,
                                             int p0, float (&r)[4]) {
  const int t = int(threadIdx.x);
  const int row = row0 + t / 2, p = p0 + t % 2 * 4;  // one float4: row t/2, columns p..p+3
  if (kVec) {
    if (row < m && p < k) {
      const float4 v = *reinterpret_cast<const float4*>(a + size_t(row) * k + p);
      r[0] = v.x, r[1] = v.y, r[2] = v.z, r[3] = v.w;
    } else {
      r[0] = r[1] = r[2] = r[3] = 0.0f;
    }
  } else {
#pragma unroll
    for (int q = 0; q < 4; ++q) r[q] = row < m && p + q < k ? a[size_t(row) * k + p + q] : 0.0f;
  }
}

template <bool kVec>
__device__ __forceinline__ void load_b_slice(const float* __restrict__ b, int n, int k, int p0,
                                             int col0, float (&r)[4]) {
  const int t = int(threadIdx.x);
  const int p = p0 + t / 32, col = col0 + t % 32 * 4;  // one float4: row p, columns col..col+3
  if (kVec) {
    if (p < k && col < n) {
      const float4 v = *reinterpret_cast<const float4*>(b + size_t(p) * n + col);
      r[0] = v.x, r[1] = v.y, r[2] = v.z, r[3] = v.w;
    } else {
      r[0] = r[1] = r[2] = r[3] = 0.0f;
    }
  } else {
#pragma unroll
    for (int q = 0; q < 4; ++q) r[q] = p < k && col + q < n ? b[size_t(p) * n + col + q] : 0.0f;
  }
}

// Writes 4 neighbouring elements of row `row` of C from column `col` on.
template <bool kVec>
__device__ __forceinline__ void store_c4(float* __restrict__ c, int m, int n, int row, int col,
                                         const float (&v)[4]) {
  if (row >= m) return;
  float* out = c + size_t(row) * n + col;
  if (kVec) {
    if (col < n) *reinterpret_cast<float4*>(out) = make_float4(v[0], v[1], v[2], v[3]);
  } else {
#pragma unroll
    for (int q = 0; q < 4; ++q)
      if (col + q < n) out[q] = v[q];
  }
}

template <bool kVec>
__global__ void __launch_bounds__(kThreads)
    register_kernel(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c,
                    int m, int n, int k) {
  __shared__ __align__(16) float as[2][kBK][kBM];  // A slice, transposed: as[p][row]
  __shared__ __align__(16) float bs[2][kBK][kBN];  // B slice: bs[p][col]
  const int tiles_n = (n + kBN - 1) / kBN;
  const int row0 = int(blockIdx.x) / tiles_n * kBM, col0 = int(blockIdx.x) % tiles_n * kBN;
  const int t = int(threadIdx.x), tx = t % 16, ty = t / 16;

  float acc[8][8] = {};  // the thread's C tile: rows ty·4 + {0..3}, 64 + ty·4 + {0..3}, etc.
  float ra[4] = {}, rb[4] = {};  // the next slice, on its way from global memory

  // Stores the slice held in ra/rb into shared buffer `buf`.
  auto stage = [&](int buf) {
#pragma unroll
    for (int q = 0; q < 4; ++q) as[buf][t % 2 * 4 + q][t / 2] = ra[q];
    *reinterpret_cast<float4*>(&bs[buf][t / 32][t % 32 * 4]) =
        make_float4(rb[0], rb[1], rb[2], rb[3]);
  };

  load_a_slice<kVec>(a, m, k, row0, 0, ra);
  load_b_slice<kVec>(b, n, k, 0, col0, rb);
  stage(0);
  __syncthreads();
  const int slices = (k + kBK - 1) / kBK;
  for (int s = 0; s < slices; ++s) {
    const int buf = s % 2;
    if (s + 1 < slices) {  // issue the next slice's global loads now; use them after the FMAs
      load_a_slice<kVec>(a, m, k, row0, (s + 1) * kBK, ra);
      load_b_slice<kVec>(b, n, k, (s + 1) * kBK, col0, rb);
    }
#pragma unroll
    for (int p = 0; p < kBK; ++p) {
      float av[8], bv[8];
      const float4 a0 = *reinterpret_cast<const float4*>(&as[buf][p][ty * 4]);
      const float4 a1 = *reinterpret_cast<const float4*>(&as[buf][p][64 + ty * 4]);
      const float4 b0 = *reinterpret_cast<const float4*>(&bs[buf][p][tx * 4]);
      const float4 b1 = *reinterpret_cast<const float4*>(&bs[buf][p][64 + tx * 4]);
      av[0] = a0.x, av[1] = a0.y, av[2] = a0.z, av[3] = a0.w;
      av[4] = a1.x, av[5] = a1.y, av[6] = a1.z, av[7] = a1.w;
      bv[0] = b0.x, bv[1] = b0.y, bv[2] = b0.z, bv[3] = b0.w;
      bv[4] = b1.x, bv[5] = b1.y, bv[6] = b1.z, bv[7] = b1.w;
#pragma unroll
      for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] += av[i] * bv[j];
    }
    if (s + 1 < slices) stage(1 - buf);
    __syncthreads();
  }

#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int row = row0 + (i < 4 ? ty * 4 + i : 64 + ty * 4 + i - 4);
    const float lo[4] = {acc[i][0], acc[i][1], acc[i][2], acc[i][3]};
    const float hi[4] = {acc[i][4], acc[i][5], acc[i][6], acc[i][7]};
    store_c4<kVec>(c, m, n, row, col0 + tx * 4, lo);
    store_c4<kVec>(c, m, n, row, col0 + 64 + tx * 4, hi);
  }
}

__global__ void to_bf16_kernel(const float* __restrict__ x, __nv_bfloat16* __restrict__ y,
                               int64_t count) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride)
    y[i] = __float2bfloat16(x[i]);
}

unsigned tiles(int m, int n, int rows, int cols) {
  return unsigned((m + rows - 1) / rows) * unsigned((n + cols - 1) / cols);
}

bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

}  // namespace

void gemm_naive(const float* a, const float* b, float* c, int m, int n, int k,
                cudaStream_t stream) {
  if (m == 0 || n == 0) return;
  naive_kernel<<<tiles(m, n, kNaiveRows, kNaiveCols), kNaiveRows * kNaiveCols, 0, stream>>>(
      a, b, c, m, n, k);
}

void gemm_smem_tiled(const float* a, const float* b, float* c, int m, int n, int k,
                     cudaStream_t stream) {
  if (m == 0 || n == 0) return;
  smem_kernel<kTile><<<tiles(m, n, kTile, kTile), kTile * kTile, 0, stream>>>(a, b, c, m, n, k);
}

void gemm_smem_tiled16(const float* a, const float* b, float* c, int m, int n, int k,
                       cudaStream_t stream) {
  if (m == 0 || n == 0) return;
  smem_kernel<16><<<tiles(m, n, 16, 16), 16 * 16, 0, stream>>>(a, b, c, m, n, k);
}

bool register_tiled_uses_vector_loads(const float* a, const float* b, const float* c, int n,
                                      int k) {
  return n % 4 == 0 && k % 4 == 0 && aligned16(a) && aligned16(b) && aligned16(c);
}

void gemm_register_tiled(const float* a, const float* b, float* c, int m, int n, int k,
                         cudaStream_t stream) {
  if (m == 0 || n == 0) return;
  if (register_tiled_uses_vector_loads(a, b, c, n, k))
    register_kernel<true><<<tiles(m, n, kBM, kBN), kThreads, 0, stream>>>(a, b, c, m, n, k);
  else
    register_kernel<false><<<tiles(m, n, kBM, kBN), kThreads, 0, stream>>>(a, b, c, m, n, k);
}

void to_bf16(const float* x, __nv_bfloat16* y, int64_t count, cudaStream_t stream) {
  if (count == 0) return;
  const int64_t blocks = std::min<int64_t>((count + 255) / 256, 4096);
  to_bf16_kernel<<<unsigned(blocks), 256, 0, stream>>>(x, y, count);
}

}  // namespace gemm_lab::cuda
