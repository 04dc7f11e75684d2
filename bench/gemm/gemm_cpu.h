// The CPU variants of the GEMM lab: six ways to compute C = A·B in float32, from the textbook
// triple loop to OpenBLAS. Each step changes one thing; docs/gemm-lab.md explains why each one
// is faster.
//
// Every matrix is row-major and densely stored: A is m×k (row stride k), B is k×n (row stride
// n), C is m×n (row stride n). Every variant overwrites C (C = A·B, never C += A·B).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace gemm_lab {

// Problem sizes; i64 so that m·n·k never overflows.
struct Shape {
  int64_t m, n, k;
  double flops() const { return 2.0 * double(m) * double(n) * double(k); }
};

// The cache sizes that the blocked variants size their tiles from (bytes, per core for L1 and
// L2, the whole shared L3). Read at run time from sysfs (machine.h), or given by a test.
struct Caches {
  int64_t l1d = 32 * 1024;
  int64_t l2 = 1024 * 1024;
  int64_t l3 = 8 * 1024 * 1024;
};

// Tile sizes of step (3): the cache-tiled loop nest (see tiled_blocking in gemm_cpu.cpp).
struct TiledBlocking {
  int64_t nc;  // columns of a B block and of the C row segment that stays in L1
  int64_t kc;  // rows of a B block: kc × nc floats sit in L2 while every row of A uses them
};

// Tile sizes of steps (4) and (5): the BLIS loop nest (see packed_blocking in gemm_cpu.cpp).
struct PackedBlocking {
  int64_t mr, nr;  // the register tile: mr × nr accumulators of C live in vector registers
  int64_t kc;      // depth of a packed panel: a kc × nr sliver of B stays in L1
  int64_t mc;      // rows of the packed A block: mc × kc floats stay in L2
  int64_t nc;      // columns of the packed B panel: kc × nc floats stay in L3
};

TiledBlocking tiled_blocking(const Caches& caches);
PackedBlocking packed_blocking(const Caches& caches);

// One sentence per choice, for the report: how each tile size follows from the cache sizes.
std::vector<std::string> explain_blocking(const Caches& caches);

// (1) i-j-k: the dot product of row i of A with column j of B for each C element. The inner
// loop walks down a column of B, n floats apart: one cache line fetched per multiply-add.
void gemm_naive(const float* a, const float* b, float* c, Shape s);

// (2) i-k-j: the same arithmetic with the two inner loops swapped. The inner loop now walks
// along a row of B and a row of C with unit stride, so the compiler vectorises it.
void gemm_reordered(const float* a, const float* b, float* c, Shape s);

// (3) i-k-j inside cache tiles: a kc × nc block of B is reused by every row of A while it sits
// in L2, and the row segment of C that the inner loop updates stays in L1.
void gemm_tiled(const float* a, const float* b, float* c, Shape s, const TiledBlocking& t);

// (4) BLIS structure: panels of A and B are packed into contiguous slivers, and a micro-kernel
// keeps an mr × nr tile of C in vector registers for the whole depth of a panel.
void gemm_packed(const float* a, const float* b, float* c, Shape s, const PackedBlocking& p);

// (5) step (4) on `threads` cores (OpenMP): the packing is shared, and the threads split the
// register tiles of each block between them.
void gemm_packed_parallel(const float* a, const float* b, float* c, Shape s,
                          const PackedBlocking& p, int threads);

// (6) OpenBLAS sgemm through cblas, with the given number of threads.
void gemm_openblas(const float* a, const float* b, float* c, Shape s, int threads);

// The ceiling of step (4): runs its micro-kernel `calls` times over the same packed slivers of
// A (mr × kc) and B (kc × nr), which stay in L1, accumulating into one mr × nr tile of C. Timing
// it shows what step (4) would reach if memory cost nothing. Returns a checksum of the tile.
float micro_kernel_in_l1(const PackedBlocking& p, int64_t calls);

// The register tile sizes that gemm_packed supports (mr rows × nr columns).
std::vector<int64_t> supported_mr();
int64_t native_nr();

}  // namespace gemm_lab
