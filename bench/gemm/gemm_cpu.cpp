// The CPU variants of the GEMM lab (gemm_cpu.h). Written for reading: each function is one step
// of the ladder, and the comments say what the step buys. docs/gemm-lab.md has the numbers.
#include "gemm_cpu.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

namespace gemm_lab {

// ------------------------------------------------------------------ (1) naive i-j-k
// Two loads per multiply-add, and the load of B is n floats away from the previous one: every
// iteration touches a new cache line (64 bytes fetched for 4 used), and for large n a new 4 KiB
// page too. The sum is one dependent chain of additions, which the compiler may not reorder
// (that would change the rounding), so nothing is vectorised: one multiply-add per cycle at best
// and, once B no longer fits in cache, one per memory latency.
void gemm_naive(const float* a, const float* b, float* c, Shape s) {
  for (int64_t i = 0; i < s.m; ++i)
    for (int64_t j = 0; j < s.n; ++j) {
      float sum = 0;
      for (int64_t p = 0; p < s.k; ++p) sum += a[i * s.k + p] * b[p * s.n + j];
      c[i * s.n + j] = sum;
    }
}

// ------------------------------------------------------------------ (2) loop order i-k-j
// The same multiply-adds, in another order: for each row i and each p, add a[i][p] times row p
// of B to row i of C. The inner loop reads B and reads and writes C with unit stride, so every
// byte of every cache line is used, the hardware prefetcher sees the streams, and the iterations
// are independent, so the compiler turns them into vector FMAs (16 floats each with AVX-512).
// What remains slow: for each row of A the whole of B streams through the caches again.
void gemm_reordered(const float* a, const float* b, float* c, Shape s) {
  std::fill(c, c + s.m * s.n, 0.0f);
  for (int64_t i = 0; i < s.m; ++i) {
    float* __restrict crow = c + i * s.n;
    for (int64_t p = 0; p < s.k; ++p) {
      const float aip = a[i * s.k + p];
      const float* __restrict brow = b + p * s.n;
      for (int64_t j = 0; j < s.n; ++j) crow[j] += aip * brow[j];
    }
  }
}

// ------------------------------------------------------------------ (3) cache tiles
// Step (2) reads all of B (k·n floats) once per row of A. Cut B into blocks of kc rows × nc
// columns that fit in L2, and run every row of A over one block before moving to the next: each
// B element then comes from DRAM or L3 once per block instead of once per row, and from L2 the
// other m − 1 times. Meanwhile the nc floats of the row of C being updated stay in L1 for all kc
// steps of the block. The inner loop is still the vectorised loop of step (2); what changed is
// where its operands come from.
TiledBlocking tiled_blocking(const Caches& caches) {
  TiledBlocking t;
  // The C row segment takes at most a quarter of L1, leaving the rest to the B rows streaming
  // through it; a multiple of 64 floats (4 cache lines).
  t.nc = std::max<int64_t>(64, caches.l1d / 4 / int64_t(sizeof(float)) / 64 * 64);
  // The kc × nc block of B fills half of L2; the other half holds the lines of A and C in flight.
  t.kc = std::max<int64_t>(16, caches.l2 / 2 / int64_t(sizeof(float)) / t.nc / 8 * 8);
  return t;
}

void gemm_tiled(const float* a, const float* b, float* c, Shape s, const TiledBlocking& t) {
  std::fill(c, c + s.m * s.n, 0.0f);
  for (int64_t jj = 0; jj < s.n; jj += t.nc) {
    const int64_t nb = std::min(t.nc, s.n - jj);
    for (int64_t pp = 0; pp < s.k; pp += t.kc) {
      const int64_t kb = std::min(t.kc, s.k - pp);
      // One kc × nc block of B, used by every row of A while it sits in L2.
      for (int64_t i = 0; i < s.m; ++i) {
        float* __restrict crow = c + i * s.n + jj;  // nb floats: in L1 for the whole p loop
        const float* arow = a + i * s.k + pp;
        for (int64_t p = 0; p < kb; ++p) {
          const float aip = arow[p];
          const float* __restrict brow = b + (pp + p) * s.n + jj;
          for (int64_t j = 0; j < nb; ++j) crow[j] += aip * brow[j];
        }
      }
    }
  }
}

// ------------------------------------------------------------------ (4) BLIS: packing + registers
// Step (3) still loads and stores C for every vector FMA: 2 loads and a store per FMA, while
// the core can do 2 FMAs per cycle but only 2-3 loads. The fix is register blocking: keep an
// mr × nr tile of C in vector registers for the whole depth of the product, and per step p load
// one row of nr B values (nr/16 vectors) and broadcast mr A values, for mr·nr/16 FMAs. With
// mr = 14 and nr = 32 that is 28 accumulators (of the 32 zmm registers), 2 vector loads and 14
// broadcasts for 28 FMAs: the FMA units, not the loads, set the pace.
//
// The loop nest around that micro-kernel is the one of BLIS (Van Zee and van de Geijn) and of
// GotoBLAS/OpenBLAS (Goto and van de Geijn), five loops around the micro-kernel, each level
// sized so that its operand stays in one cache level:
//
//   for jc in n step nc:          B panel kc × nc, packed, lives in L3
//     for pc in k step kc:
//       pack B[pc:pc+kc, jc:jc+nc] into slivers of nr columns (each sliver kc × nr, contiguous)
//       for ic in m step mc:      A block mc × kc, packed, lives in L2
//         pack A[ic:ic+mc, pc:pc+kc] into slivers of mr rows (each sliver kc × mr, contiguous)
//         for jr in nc step nr:   one B sliver (kc × nr) lives in L1
//           for ir in mc step mr: one A sliver streams from L2
//             micro-kernel: C[mr × nr] (+)= A sliver · B sliver, in registers
//
// Packing copies each panel once into the exact order in which the micro-kernel reads it, so
// the micro-kernel walks memory strictly forward, one cache line after the next, with no TLB
// misses and no cache-set conflicts (a row stride that is a power of two maps the rows of an
// unpacked matrix onto the same few cache sets). The copy costs O(mc·kc) and is reused
// n/nr times (A) or m/mr times (B). The edges (m or n not a multiple of mr, nr) are packed with
// zeros, so the micro-kernel never branches; only the store of an edge tile is partial.

// A vector of 16 floats: one AVX-512 register (GCC vector extension). Arithmetic on it is one
// instruction per register with AVX-512, and two AVX2 or four SSE instructions on older CPUs,
// so the code stays portable. The lab is built with -ffp-contract=fast, so acc += x * y is one
// fused multiply-add.
typedef float v16 __attribute__((vector_size(64)));
// The same vector at any float alignment, for loads and stores of C (its rows start anywhere).
typedef float v16u __attribute__((vector_size(64), aligned(4)));

constexpr int64_t kNR = 32;  // two vectors of C columns per micro-tile row

int64_t native_nr() {
  return kNR;
}
std::vector<int64_t> supported_mr() {
  return {4, 6, 8, 12, 14};
}

// kc steps of C[MR × 32] (+)= A sliver (kc × MR, k-major) · B sliver (kc × 32, k-major).
// `a` and `b` are 64-byte aligned (packed buffers); c has row stride ldc and any alignment.
template <int MR>
void micro_kernel(int64_t kc, const float* __restrict a, const float* __restrict b,
                  float* __restrict c, int64_t ldc, bool accumulate) {
  v16 acc0[MR], acc1[MR];  // the C tile: 2·MR registers, kept there for all kc steps
  for (int i = 0; i < MR; ++i) acc0[i] = acc1[i] = v16{};
  // C is the one operand that is not packed: its rows lie n floats apart, and the tile was last
  // touched a whole block ago, so it is probably not in L1. Ask for its cache lines now, and
  // they arrive while the FMAs run instead of stalling the stores at the end.
  for (int i = 0; i < MR; ++i) {
    __builtin_prefetch(c + i * ldc, 1);
    __builtin_prefetch(c + i * ldc + 16, 1);
  }
  for (int64_t p = 0; p < kc; ++p) {
    const v16 b0 = *reinterpret_cast<const v16*>(b + p * kNR);
    const v16 b1 = *reinterpret_cast<const v16*>(b + p * kNR + 16);
    for (int i = 0; i < MR; ++i) {
      const float ai = a[p * MR + i];  // broadcast to all 16 lanes (vfmadd231ps ...{1to16})
      acc0[i] += ai * b0;
      acc1[i] += ai * b1;
    }
  }
  for (int i = 0; i < MR; ++i) {
    v16u* row = reinterpret_cast<v16u*>(c + i * ldc);
    if (accumulate) {
      row[0] += acc0[i];
      row[1] += acc1[i];
    } else {
      row[0] = acc0[i];
      row[1] = acc1[i];
    }
  }
}

using MicroKernel = void (*)(int64_t, const float*, const float*, float*, int64_t, bool);

MicroKernel micro_kernel_for(int64_t mr) {
  switch (mr) {
    case 4:
      return micro_kernel<4>;
    case 6:
      return micro_kernel<6>;
    case 8:
      return micro_kernel<8>;
    case 12:
      return micro_kernel<12>;
    case 14:
      return micro_kernel<14>;
  }
  return nullptr;
}

// A full tile goes straight to C; an edge tile (rows < mr or cols < nr) is computed into a
// scratch tile and only its valid part is written, so nothing past C's edges is touched.
void run_tile(MicroKernel kernel, int64_t mr, int64_t kc, const float* a, const float* b, float* c,
              int64_t ldc, int64_t rows, int64_t cols, bool accumulate) {
  if (rows == mr && cols == kNR) {
    kernel(kc, a, b, c, ldc, accumulate);
    return;
  }
  alignas(64) float tile[16 * kNR];
  kernel(kc, a, b, tile, kNR, false);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j)
      c[i * ldc + j] = accumulate ? c[i * ldc + j] + tile[i * kNR + j] : tile[i * kNR + j];
}

// Packs rows [r0, r0 + mr) of an mc × kc block of A (row stride lda) into one sliver: for each
// p, the mr values A[r0 .. r0 + mr)[p] side by side. Rows past `rows` are zero.
void pack_a_sliver(const float* a, int64_t lda, int64_t rows, int64_t kc, int64_t mr, float* out) {
  for (int64_t p = 0; p < kc; ++p)
    for (int64_t i = 0; i < mr; ++i) out[p * mr + i] = i < rows ? a[i * lda + p] : 0.0f;
}

// Packs columns [0, cols) of a kc-row block of B (row stride ldb) into one sliver of kNR
// columns: for each p, kNR values of row p side by side. Columns past `cols` are zero.
void pack_b_sliver(const float* b, int64_t ldb, int64_t kc, int64_t cols, float* out) {
  for (int64_t p = 0; p < kc; ++p) {
    const float* row = b + p * ldb;
    float* o = out + p * kNR;
    if (cols == kNR) {
      std::memcpy(o, row, kNR * sizeof(float));
    } else {
      for (int64_t j = 0; j < kNR; ++j) o[j] = j < cols ? row[j] : 0.0f;
    }
  }
}

PackedBlocking packed_blocking(const Caches& caches) {
  PackedBlocking p;
  p.mr = 14;
  p.nr = kNR;
  const int64_t f = sizeof(float);
  // kc: one B sliver (kc × nr floats) is read by every micro-kernel call of a block, so it
  // should stay in L1: at most the size of L1. Why not smaller: each call also loads and stores
  // its mr × nr tile of C, whose cost is amortised over kc steps, so a deep sliver pays. On the
  // development machine (48 KiB L1) kc from 192 to 384 were within 10% of each other, with the
  // largest, a sliver exactly the size of L1, slightly ahead: the A slivers that stream past it
  // need only 4 bytes per 2 FMAs, which L2 delivers easily. Multiple of 8.
  p.kc = std::clamp<int64_t>(caches.l1d / (p.nr * f) / 8 * 8, 64, 1024);
  // mc: the packed A block (mc × kc) takes half of L2; the B sliver and C tiles pass through
  // the rest. Multiple of mr.
  p.mc = std::clamp<int64_t>(caches.l2 / 2 / (p.kc * f) / p.mr * p.mr, p.mr, 4096 / p.mr * p.mr);
  // nc: the packed B panel (kc × nc) takes at most half of the L3; multiple of nr, capped at
  // 4096 (a larger panel buys nothing once the packing cost is amortised).
  p.nc = std::clamp<int64_t>(caches.l3 / 2 / (p.kc * f) / p.nr * p.nr, p.nr, 4096);
  return p;
}

namespace {

// Packed buffers, 64-byte aligned (v16's alignment), reused across calls.
struct Workspace {
  std::vector<v16> a, b;
  float* a_ptr(size_t floats) {
    if (a.size() * 16 < floats) a.resize((floats + 15) / 16);
    return reinterpret_cast<float*>(a.data());
  }
  float* b_ptr(size_t floats) {
    if (b.size() * 16 < floats) b.resize((floats + 15) / 16);
    return reinterpret_cast<float*>(b.data());
  }
};

int64_t round_up(int64_t x, int64_t to) {
  return (x + to - 1) / to * to;
}

void check_blocking(const PackedBlocking& p) {
  if (p.nr != kNR || !micro_kernel_for(p.mr) || p.kc <= 0 || p.mc <= 0 || p.nc <= 0)
    throw std::invalid_argument("gemm_packed: unsupported blocking (mr " + std::to_string(p.mr) +
                                ", nr " + std::to_string(p.nr) + ")");
}

}  // namespace

void gemm_packed(const float* a, const float* b, float* c, Shape s, const PackedBlocking& bl) {
  check_blocking(bl);
  if (s.k == 0) std::fill(c, c + s.m * s.n, 0.0f);
  const MicroKernel kernel = micro_kernel_for(bl.mr);
  thread_local Workspace ws;
  float* bp = ws.b_ptr(size_t(bl.kc * round_up(std::min(bl.nc, s.n), kNR)));
  float* ap = ws.a_ptr(size_t(bl.kc * round_up(std::min(bl.mc, s.m), bl.mr)));
  for (int64_t jc = 0; jc < s.n; jc += bl.nc) {  // loop 5: B panels
    const int64_t nb = std::min(bl.nc, s.n - jc);
    for (int64_t pc = 0; pc < s.k; pc += bl.kc) {  // loop 4: depth
      const int64_t kb = std::min(bl.kc, s.k - pc);
      for (int64_t jr = 0; jr < nb; jr += kNR)
        pack_b_sliver(b + pc * s.n + jc + jr, s.n, kb, std::min(kNR, nb - jr), bp + jr * kb);
      for (int64_t ic = 0; ic < s.m; ic += bl.mc) {  // loop 3: A blocks
        const int64_t mb = std::min(bl.mc, s.m - ic);
        for (int64_t ir = 0; ir < mb; ir += bl.mr)
          pack_a_sliver(a + (ic + ir) * s.k + pc, s.k, std::min(bl.mr, mb - ir), kb, bl.mr,
                        ap + ir * kb);
        for (int64_t jr = 0; jr < nb; jr += kNR)      // loop 2: B slivers
          for (int64_t ir = 0; ir < mb; ir += bl.mr)  // loop 1: A slivers
            run_tile(kernel, bl.mr, kb, ap + ir * kb, bp + jr * kb, c + (ic + ir) * s.n + jc + jr,
                     s.n, std::min(bl.mr, mb - ir), std::min(kNR, nb - jr), pc > 0);
      }
    }
  }
}

float micro_kernel_in_l1(const PackedBlocking& bl, int64_t calls) {
  check_blocking(bl);
  const MicroKernel kernel = micro_kernel_for(bl.mr);
  std::vector<v16> a(size_t((bl.mr * bl.kc + 15) / 16)), b(size_t(bl.kc * kNR / 16));
  for (size_t i = 0; i < a.size(); ++i) a[i] = v16{} + 1e-3f * float(i % 7);
  for (size_t i = 0; i < b.size(); ++i) b[i] = v16{} + 1e-3f * float(i % 5);
  alignas(64) float tile[16 * kNR] = {};
  for (int64_t q = 0; q < calls; ++q)
    kernel(bl.kc, reinterpret_cast<const float*>(a.data()),
           reinterpret_cast<const float*>(b.data()), tile, kNR, true);
  float sum = 0;
  for (float x : tile) sum += x;
  return sum;
}

// ------------------------------------------------------------------ (5) both cores
// The same loop nest inside one OpenMP parallel region. The threads pack the B panel and the A
// block together (each takes a share of the slivers), wait for each other, then split the
// (jr, ir) micro-tiles of the block between them: every thread reads the shared packed panels
// and writes its own tiles of C, so no two threads ever write the same element. Each core has
// its own L1 and L2, so each keeps its own copies of the slivers it is working on.
void gemm_packed_parallel(const float* a, const float* b, float* c, Shape s,
                          const PackedBlocking& bl, int threads) {
  check_blocking(bl);
  if (s.k == 0) std::fill(c, c + s.m * s.n, 0.0f);
  const MicroKernel kernel = micro_kernel_for(bl.mr);
  static Workspace ws;  // shared by the team; one call at a time
  float* bp = ws.b_ptr(size_t(bl.kc * round_up(std::min(bl.nc, s.n), kNR)));
  float* ap = ws.a_ptr(size_t(bl.kc * round_up(std::min(bl.mc, s.m), bl.mr)));
#pragma omp parallel num_threads(threads)
  for (int64_t jc = 0; jc < s.n; jc += bl.nc) {
    const int64_t nb = std::min(bl.nc, s.n - jc);
    const int64_t n_slivers = (nb + kNR - 1) / kNR;
    for (int64_t pc = 0; pc < s.k; pc += bl.kc) {
      const int64_t kb = std::min(bl.kc, s.k - pc);
      // The implicit barrier at the end of each `omp for` is what makes the packed panel
      // complete before anyone reads it, and fully read before anyone overwrites it.
#pragma omp for schedule(static)
      for (int64_t q = 0; q < n_slivers; ++q)
        pack_b_sliver(b + pc * s.n + jc + q * kNR, s.n, kb, std::min(kNR, nb - q * kNR),
                      bp + q * kNR * kb);
      for (int64_t ic = 0; ic < s.m; ic += bl.mc) {
        const int64_t mb = std::min(bl.mc, s.m - ic);
        const int64_t m_slivers = (mb + bl.mr - 1) / bl.mr;
#pragma omp for schedule(static)
        for (int64_t r = 0; r < m_slivers; ++r)
          pack_a_sliver(a + (ic + r * bl.mr) * s.k + pc, s.k, std::min(bl.mr, mb - r * bl.mr), kb,
                        bl.mr, ap + r * bl.mr * kb);
#pragma omp for collapse(2) schedule(static)
        for (int64_t q = 0; q < n_slivers; ++q)
          for (int64_t r = 0; r < m_slivers; ++r)
            run_tile(kernel, bl.mr, kb, ap + r * bl.mr * kb, bp + q * kNR * kb,
                     c + (ic + r * bl.mr) * s.n + jc + q * kNR, s.n,
                     std::min(bl.mr, mb - r * bl.mr), std::min(kNR, nb - q * kNR), pc > 0);
      }
    }
  }
}

// ------------------------------------------------------------------ (6) OpenBLAS
// The library: the same structure as (4)-(5) with hand-scheduled assembly micro-kernels, tuned
// prefetching and blocking per CPU model. Row-major C = A·B maps directly onto cblas.
void gemm_openblas(const float* a, const float* b, float* c, Shape s, int threads) {
  openblas_set_num_threads(threads);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(s.m), int(s.n), int(s.k), 1.0f, a,
              int(s.k), b, int(s.n), 0.0f, c, int(s.n));
}

std::vector<std::string> explain_blocking(const Caches& caches) {
  const TiledBlocking t = tiled_blocking(caches);
  const PackedBlocking p = packed_blocking(caches);
  auto kib = [](int64_t bytes) { return std::to_string(bytes / 1024) + " KiB"; };
  const int64_t f = sizeof(float);
  return {
      "(3) tiled: nc = " + std::to_string(t.nc) + " columns, so the C row segment (" +
          kib(t.nc * f) + ") takes a quarter of L1 (" + kib(caches.l1d) +
          "); kc = " + std::to_string(t.kc) + " rows, so the kc x nc block of B (" +
          kib(t.kc * t.nc * f) + ") takes half of L2 (" + kib(caches.l2) + ").",
      "(4) packed: register tile mr x nr = " + std::to_string(p.mr) + " x " + std::to_string(p.nr) +
          " (" + std::to_string(p.mr * p.nr / 16) + " accumulator registers of 16 floats); kc = " +
          std::to_string(p.kc) + ", so one packed B sliver (kc x nr, " + kib(p.kc * p.nr * f) +
          ") fills L1, and the C tile's load and store are amortised over kc steps; mc = " +
          std::to_string(p.mc) + ", so the packed A block (mc x kc, " + kib(p.mc * p.kc * f) +
          ") takes about half of L2; nc = " + std::to_string(p.nc) +
          ", so the packed B panel (kc x nc, " + kib(p.kc * p.nc * f) + ") fits easily in L3 (" +
          kib(caches.l3) + ").",
  };
}

}  // namespace gemm_lab
