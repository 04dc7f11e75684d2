// Host-side logic of the CUDA backend, checked without a GPU (these tests run everywhere): the
// view coalescing and offset arithmetic that the strided kernels use, the row-major to
// column-major mapping of GEMM onto cuBLAS, run through a naive GEMM with BLAS semantics, the
// pooling window arithmetic against brute force, and the work items of the fused optimizer
// launches.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/gemm_plan.h"
#include "backend/cuda/multi_tensor.h"
#include "backend/cuda/pool_windows.h"
#include "backend/cuda/tensor_args.h"
#include "freight/freight.h"

namespace freight::cuda {
namespace {

int64_t numel_of(const StridedView& v) {
  int64_t n = 1;
  for (int d = 0; d < v.rank; ++d) n *= v.shape[d];
  return n;
}

// Coalescing must not move any element: every flat index maps to the same offset before and
// after, in every view, and the rank never grows.
void expect_coalesce_keeps_offsets(std::vector<StridedView> views, const std::string& what) {
  std::vector<StridedView> merged = views;
  coalesce(merged.data(), int(merged.size()));
  int64_t n = numel_of(views[0]);
  for (size_t k = 0; k < views.size(); ++k) {
    EXPECT_LE(merged[k].rank, views[k].rank) << what;
    EXPECT_EQ(numel_of(merged[k]), n) << what;
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(view_offset(merged[k], i), view_offset(views[k], i))
          << what << ": view " << k << ", flat index " << i;
  }
}

TEST(CudaHostLogic, CoalesceKeepsEveryOffsetOfRealViews) {
  Tensor base = Tensor::zeros({4, 5, 6});
  Tensor out = Tensor::zeros({4, 5, 6});
  expect_coalesce_keeps_offsets({strided_view(base), strided_view(out)}, "contiguous pair");
  StridedView packed[1] = {strided_view(base)};
  coalesce(packed, 1);
  EXPECT_EQ(packed[0].rank, 1) << "a contiguous tensor is one dimension";
  Tensor t = base.transpose(0, 2);  // [6, 5, 4]
  expect_coalesce_keeps_offsets({strided_view(t), strided_view(Tensor::zeros({6, 5, 4}))},
                                "transpose");
  Tensor p = base.permute({1, 2, 0});  // [5, 6, 4]
  expect_coalesce_keeps_offsets({strided_view(p), strided_view(Tensor::zeros({5, 6, 4}))},
                                "permute");
  Tensor s = base.slice(1, 1, 4);  // [4, 3, 6]
  expect_coalesce_keeps_offsets({strided_view(s), strided_view(Tensor::zeros({4, 3, 6}))}, "slice");
  // A broadcast operand: [5, 1] expanded to [4, 5, 6] (strides 0, 1, 0).
  StridedView bcast;
  bcast.rank = 3;
  int64_t shape[3] = {4, 5, 6}, strides[3] = {0, 1, 0};
  for (int d = 0; d < 3; ++d) bcast.shape[d] = shape[d], bcast.strides[d] = strides[d];
  expect_coalesce_keeps_offsets({bcast, strided_view(base), strided_view(out)}, "broadcast");
  // A scalar broadcast everywhere (all strides 0) and a 0-d tensor.
  StridedView zero = bcast;
  zero.strides[1] = 0;
  expect_coalesce_keeps_offsets({zero, strided_view(out)}, "all-zero strides");
  expect_coalesce_keeps_offsets({strided_view(Tensor::zeros({}))}, "rank 0");
}

TEST(CudaHostLogic, CoalesceKeepsEveryOffsetOfRandomViews) {
  std::mt19937 rng(21);
  for (int trial = 0; trial < 500; ++trial) {
    int rank = 1 + int(rng() % kMaxRank);
    int count = 1 + int(rng() % 3);
    std::vector<StridedView> views(static_cast<size_t>(count));
    int64_t shape[kMaxRank];
    for (int d = 0; d < rank; ++d) shape[d] = 1 + int64_t(rng() % 3);
    for (auto& v : views) {
      v.rank = rank;
      // Mostly contiguous-like strides with random broadcasts and gaps, to exercise merges.
      int64_t stride = 1;
      for (int d = rank - 1; d >= 0; --d) {
        v.shape[d] = shape[d];
        switch (rng() % 4) {
          case 0:
            v.strides[d] = 0;
            break;
          case 1:
            v.strides[d] = stride * 2;
            break;
          default:
            v.strides[d] = stride;
            break;
        }
        stride = std::max<int64_t>(1, v.strides[d]) * shape[d];
      }
    }
    expect_coalesce_keeps_offsets(views, "random trial " + std::to_string(trial));
  }
}

// C = op(A)·op(B) in BLAS's column-major convention (what cuBLAS computes), beta = 0.
void column_major_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const double* a,
                       int64_t lda, const double* b, int64_t ldb, double* c, int64_t ldc) {
  for (int64_t j = 0; j < n; ++j)
    for (int64_t i = 0; i < m; ++i) {
      double acc = 0;
      for (int64_t l = 0; l < k; ++l) {
        double x = trans_a ? a[l + i * lda] : a[i + l * lda];
        double y = trans_b ? b[j + l * ldb] : b[l + j * ldb];
        acc += x * y;
      }
      c[i + j * ldc] = acc;
    }
}

TEST(CudaHostLogic, GemmPlanComputesTheRowMajorProduct) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> dist(-1, 1);
  const int64_t m = 3, n = 4, k = 5;
  for (int batch : {0, 2}) {  // 0: 2-D operands
    for (bool shared_b : {false, true}) {
      if (batch == 0 && shared_b) continue;
      for (bool ta : {false, true}) {
        for (bool tb : {false, true}) {
          int64_t bs = batch == 0 ? 1 : batch;
          std::vector<int64_t> a_dims =
              ta ? std::vector<int64_t>{k, m} : std::vector<int64_t>{m, k};
          std::vector<int64_t> b_dims =
              tb ? std::vector<int64_t>{n, k} : std::vector<int64_t>{k, n};
          std::vector<int64_t> c_dims{m, n};
          if (batch) {
            a_dims.insert(a_dims.begin(), batch);
            if (!shared_b) b_dims.insert(b_dims.begin(), batch);
            c_dims.insert(c_dims.begin(), batch);
          }
          int64_t b_count = shared_b ? 1 : bs;
          std::vector<double> a(size_t(bs * m * k)), b(size_t(b_count * k * n));
          for (double& v : a) v = dist(rng);
          for (double& v : b) v = dist(rng);
          // The expected row-major product, from the definition.
          std::vector<double> want(size_t(bs * m * n));
          for (int64_t q = 0; q < bs; ++q)
            for (int64_t i = 0; i < m; ++i)
              for (int64_t j = 0; j < n; ++j) {
                const double* pa = a.data() + q * m * k;
                const double* pb = b.data() + (shared_b ? 0 : q * k * n);
                double acc = 0;
                for (int64_t l = 0; l < k; ++l)
                  acc +=
                      (ta ? pa[l * m + i] : pa[i * k + l]) * (tb ? pb[j * k + l] : pb[l * n + j]);
                want[size_t(q * m * n + i * n + j)] = acc;
              }
          GemmPlan p = plan_gemm(int(a_dims.size()), a_dims.data(), ta, int(b_dims.size()),
                                 b_dims.data(), tb, int(c_dims.size()), c_dims.data());
          std::string what = "batch " + std::to_string(batch) + (shared_b ? " shared b" : "") +
                             " ta " + std::to_string(ta) + " tb " + std::to_string(tb);
          // cuBLAS's argument rules: each leading dimension covers the rows of its stored
          // column-major matrix, or the call fails with CUBLAS_STATUS_INVALID_VALUE.
          EXPECT_GE(p.ld_first, p.trans_first ? p.depth : p.rows) << what;
          EXPECT_GE(p.ld_second, p.trans_second ? p.cols : p.depth) << what;
          EXPECT_GE(p.ld_out, p.rows) << what;
          EXPECT_EQ(p.batch, bs) << what;
          std::vector<double> got(want.size(), -1.0);
          for (int64_t q = 0; q < p.batch; ++q)
            column_major_gemm(p.trans_first, p.trans_second, p.rows, p.cols, p.depth,
                              b.data() + q * p.stride_first, p.ld_first,
                              a.data() + q * p.stride_second, p.ld_second,
                              got.data() + q * p.stride_out, p.ld_out);
          for (size_t e = 0; e < want.size(); ++e)
            ASSERT_NEAR(got[e], want[e], 1e-12) << what << ", element " << e;
        }
      }
    }
  }
}

// Every pooling geometry the op accepts (padding at most half the kernel, the kernel inside the
// padded input), small enough to enumerate: the windows covering each input position are
// exactly those whose span holds it, and window extents are the spans clipped to the axis.
TEST(CudaHostLogic, PoolWindowArithmeticMatchesBruteForce) {
  int checked = 0;
  for (int64_t len = 1; len <= 9; ++len)
    for (int64_t kernel = 1; kernel <= 5; ++kernel)
      for (int64_t stride = 1; stride <= 4; ++stride)
        for (int64_t pad = 0; 2 * pad <= kernel; ++pad) {
          if (len + 2 * pad < kernel) continue;
          const int64_t out = (len + 2 * pad - kernel) / stride + 1;
          const std::string what = "len " + std::to_string(len) + " kernel " +
                                   std::to_string(kernel) + " stride " + std::to_string(stride) +
                                   " pad " + std::to_string(pad);
          for (int64_t i = 0; i < out; ++i) {
            const IndexRange e = window_extent(i, stride, pad, kernel, len);
            int64_t lo = len, hi = 0;  // brute force: the span's positions inside [0, len)
            for (int64_t k = 0; k < kernel; ++k) {
              const int64_t p = i * stride - pad + k;
              if (p >= 0 && p < len) lo = std::min(lo, p), hi = std::max(hi, p + 1);
            }
            ASSERT_LT(lo, hi) << what << ": window " << i << " lies in the padding";
            EXPECT_EQ(e.lo, lo) << what << ", window " << i;
            EXPECT_EQ(e.hi, hi) << what << ", window " << i;
          }
          for (int64_t pos = 0; pos < len; ++pos) {
            const IndexRange r = windows_covering(pos, stride, pad, kernel, out);
            for (int64_t i = 0; i < out; ++i) {
              const bool covers = i * stride - pad <= pos && pos < i * stride - pad + kernel;
              const bool listed = r.lo <= i && i < r.hi;
              ASSERT_EQ(listed, covers) << what << ", position " << pos << ", window " << i;
            }
            ++checked;
          }
        }
  EXPECT_GT(checked, 500);
}

// The work items of a fused multi-tensor launch cover every element of every tensor exactly
// once (sizes around the chunk boundary, empty tensors included), and the serialised entries
// read back unchanged.
TEST(CudaHostLogic, MultiTensorTableCoversEveryElementOnce) {
  const int64_t C = kMultiTensorChunk;
  const std::vector<int64_t> sizes = {0, 1, 7, C - 1, C, C + 1, 3 * C, 0, 2 * C + 5, 1};
  std::vector<MultiTensorEntry> entries;
  static float dummy[4];
  for (size_t t = 0; t < sizes.size(); ++t)
    entries.push_back(
        {dummy + t % 4, dummy, nullptr, dummy + 1, sizes[t], int32_t(t % 2), int32_t(t)});
  std::vector<unsigned char> bytes;
  const MultiTensorLayout layout = build_multi_tensor_table(entries, bytes);
  ASSERT_EQ(bytes.size(), layout.bytes());
  ASSERT_EQ(layout.tensors, int64_t(sizes.size()));
  ASSERT_EQ(layout.chunks_offset() % 8, 0u);
  for (size_t t = 0; t < entries.size(); ++t) {
    MultiTensorEntry back;
    std::memcpy(&back, bytes.data() + t * sizeof(MultiTensorEntry), sizeof back);
    EXPECT_EQ(back.p, entries[t].p);
    EXPECT_EQ(back.n, entries[t].n);
    EXPECT_EQ(back.dtype, entries[t].dtype);
    EXPECT_EQ(back.aux, entries[t].aux);
  }
  std::vector<std::vector<int>> hits(sizes.size());
  for (size_t t = 0; t < sizes.size(); ++t) hits[t].assign(size_t(sizes[t]), 0);
  for (int64_t c = 0; c < layout.chunks; ++c) {
    MultiTensorChunk item;
    std::memcpy(&item, bytes.data() + layout.chunks_offset() + c * sizeof item, sizeof item);
    ASSERT_GE(item.tensor, 0);
    ASSERT_LT(item.tensor, int32_t(sizes.size()));
    const int64_t n = sizes[size_t(item.tensor)];
    const int64_t begin = int64_t(item.chunk) * C, end = std::min(n, begin + C);
    ASSERT_LT(begin, end) << "an empty work item for tensor " << item.tensor;
    for (int64_t i = begin; i < end; ++i) ++hits[size_t(item.tensor)][size_t(i)];
  }
  for (size_t t = 0; t < sizes.size(); ++t)
    for (int64_t i = 0; i < sizes[t]; ++i)
      ASSERT_EQ(hits[t][size_t(i)], 1) << "tensor " << t << ", element " << i;
}

}  // namespace
}  // namespace freight::cuda
