// Every CPU variant of the GEMM lab against the float64 reference, on odd sizes that are not
// multiples of any tile, and with tiny caches so that every blocking loop runs several times.
// Keeps the lab from breaking silently (label unit, well under a second).
#include <gtest/gtest.h>

#include <cmath>

#include "gemm_check.h"
#include "gemm_cpu.h"
#include "machine.h"

namespace gemm_lab {
namespace {

// Shapes with no common factor with 8, 16, 32, 14 or the block sizes, a vector, a single
// element and an empty sum (C must then be zero).
const Shape kShapes[] = {{67, 45, 31}, {1, 1, 1}, {3, 100, 7}, {130, 33, 129}, {5, 7, 0}};

// Real cache sizes make one block of every small problem; these tiny blocks make many, so every
// blocking loop and every edge case of the packing runs.
const TiledBlocking kTinyTiled{16, 8};
PackedBlocking tiny_packed(int64_t mr) {
  return PackedBlocking{mr, native_nr(), 16, 2 * mr, 64};
}

void expect_matches(const char* what, Shape s,
                    const std::function<void(const float*, const float*, float*, Shape)>& gemm) {
  std::vector<float> a(size_t(s.m * s.k)), b(size_t(s.k * s.n));
  fill_uniform(a, 11 + uint64_t(s.m));
  fill_uniform(b, 17 + uint64_t(s.n));
  std::vector<float> c(size_t(s.m * s.n), std::nanf(""));  // every element must be written
  gemm(a.data(), b.data(), c.data(), s);
  const Reference ref(a.data(), b.data(), s);
  const CheckResult r = ref.check(c.data(), error_bound(s.k));
  EXPECT_TRUE(r.ok()) << what << " on " << s.m << "x" << s.n << "x" << s.k << ": " << r.describe();
  EXPECT_EQ(r.checked, s.m * s.n);
}

TEST(GemmLab, NaiveMatchesReference) {
  for (Shape s : kShapes) expect_matches("naive", s, gemm_naive);
}

TEST(GemmLab, ReorderedMatchesReference) {
  for (Shape s : kShapes) expect_matches("reordered", s, gemm_reordered);
}

TEST(GemmLab, TiledMatchesReference) {
  for (const TiledBlocking& t : {tiled_blocking(read_caches()), kTinyTiled}) {
    for (Shape s : kShapes)
      expect_matches("tiled", s, [&](const float* a, const float* b, float* c, Shape sh) {
        gemm_tiled(a, b, c, sh, t);
      });
  }
}

TEST(GemmLab, PackedMatchesReferenceForEveryRegisterTile) {
  for (int64_t mr : supported_mr()) {
    PackedBlocking real = packed_blocking(read_caches());
    real.mr = mr;
    real.mc = std::max<int64_t>(mr, real.mc / mr * mr);
    for (const PackedBlocking& p : {real, tiny_packed(mr)})
      for (Shape s : kShapes)
        expect_matches(("packed mr=" + std::to_string(mr)).c_str(), s,
                       [&](const float* a, const float* b, float* c, Shape sh) {
                         gemm_packed(a, b, c, sh, p);
                       });
  }
}

TEST(GemmLab, PackedParallelMatchesReference) {
  for (const PackedBlocking& p : {packed_blocking(read_caches()), tiny_packed(6)})
    for (int threads : {1, 2, 3}) {
      for (Shape s : kShapes)
        expect_matches("packed parallel", s,
                       [&](const float* a, const float* b, float* c, Shape sh) {
                         gemm_packed_parallel(a, b, c, sh, p, threads);
                       });
    }
}

TEST(GemmLab, OpenBlasMatchesReference) {
  for (Shape s : kShapes)
    expect_matches("openblas", s, [](const float* a, const float* b, float* c, Shape sh) {
      gemm_openblas(a, b, c, sh, 1);
    });
}

TEST(GemmLab, BlockingFromCachesIsUsable) {
  const Caches caches = read_caches();
  const TiledBlocking t = tiled_blocking(caches);
  const PackedBlocking p = packed_blocking(caches);
  EXPECT_GT(t.nc, 0);
  EXPECT_GT(t.kc, 0);
  EXPECT_EQ(p.nr, native_nr());
  EXPECT_EQ(p.mc % p.mr, 0);
  EXPECT_EQ(p.nc % p.nr, 0);
  // The claims of explain_blocking: the B sliver fits in L1, the A block in L2.
  EXPECT_LE(p.kc * p.nr * 4, caches.l1d);
  EXPECT_LE(p.mc * p.kc * 4, caches.l2);
}

TEST(GemmLab, CheckerCatchesAMissingTerm) {
  // The bound must be tight enough to see one product left out of one dot product.
  const Shape s{20, 20, 64};
  std::vector<float> a(size_t(s.m * s.k)), b(size_t(s.k * s.n)), c(size_t(s.m * s.n));
  fill_uniform(a, 3);
  fill_uniform(b, 4);
  gemm_naive(a.data(), b.data(), c.data(), s);
  const Reference ref(a.data(), b.data(), s);
  ASSERT_TRUE(ref.check(c.data(), error_bound(s.k)).ok());
  c[7 * s.n + 9] -= a[7 * s.k + 5] * b[5 * s.n + 9];
  const CheckResult r = ref.check(c.data(), error_bound(s.k));
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.worst_i, 7);
  EXPECT_EQ(r.worst_j, 9);
}

TEST(GemmLab, SampledReferenceCoversEdges) {
  const Shape s{300, 200, 50};
  std::vector<float> a(size_t(s.m * s.k)), b(size_t(s.k * s.n)), c(size_t(s.m * s.n));
  fill_uniform(a, 5);
  fill_uniform(b, 6);
  gemm_reordered(a.data(), b.data(), c.data(), s);
  const Reference ref(a.data(), b.data(), s, /*full_limit=*/1e3, /*samples=*/8);
  EXPECT_FALSE(ref.full());
  EXPECT_TRUE(ref.check(c.data(), error_bound(s.k)).ok());
  c[(s.m - 1) * s.n + (s.n - 1)] += 1;  // the last element: in the last sampled row
  EXPECT_FALSE(ref.check(c.data(), error_bound(s.k)).ok());
}

}  // namespace
}  // namespace gemm_lab
