// CUDA reductions over the middle axis of a contiguous [outer, reduced, inner] tensor.
//
// sum_axis accumulates in double for both float32 and float64 (the loads dominate; double adds
// cost nothing here), and its summation order depends only on the shape, so results are the
// same from run to run.
//
//   inner == 1 (row sums): one block per row (threads_for_row(reduced) threads, a grid-stride
//     loop over rows); each thread sums a strided subset of the row, then a warp-shuffle and
//     shared-memory tree (block_reduce.cuh) combines the threads.
//   inner > 1 (column sums): one thread per output element (o, i), 256 per block, walking the
//     reduced axis with stride `inner`, so the 32 threads of a warp read 32 adjacent columns
//     (coalesced).
//
// Both cases split a long reduced axis into chunks when the output alone would give the GPU too
// little parallel work (a full sum is one row; a bias gradient [batch, 10] is ten columns):
// pass 1 writes double partial sums [outer, split, inner], pass 2 reduces them with the same
// kernel (split becomes the reduced axis). The split depends only on the shape.
//
// argmax_axis: one thread per output element (o, i), scanning the reduced axis in order by the
// CPU's rule (ops/kernels/argmax_rule.h: the first maximum, a NaN above everything).
#include "backend/cuda/block_reduce.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_context.h"
#include "backend/cuda/dispatch.h"
#include "ops/kernels/argmax_rule.h"
#include "ops/kernels/reduce.h"

namespace freight::cuda {
namespace {

// Row sums in chunks: x is [rows, n]; chunk c of row r covers elements
// [c·chunk, min(n, (c + 1)·chunk)) and its sum goes to out[r·split + c]. One block per
// (row, chunk) pair, grid-stride over the pairs. split == 1, chunk == n is the plain row sum.
template <class In, class Out>
__global__ void sum_rows_kernel(const In* x, int64_t rows, int64_t n, int64_t split, int64_t chunk,
                                Out* out) {
  __shared__ double scratch[32];
  for (int64_t b = blockIdx.x; b < rows * split; b += gridDim.x) {  // uniform across the block
    int64_t r = b / split, c = b % split;
    int64_t begin = c * chunk, end = min(n, begin + chunk);
    const In* xr = x + r * n;
    double acc = 0;
    for (int64_t j = begin + threadIdx.x; j < end; j += blockDim.x) acc += double(xr[j]);
    acc = block_reduce(acc, 0.0, SumOp{}, scratch);
    if (threadIdx.x == 0) out[b] = Out(acc);
  }
}

// Column sums in chunks: x is [outer, n, inner]; thread (o, c, i) sums x[o, r, i] over the rows
// r of chunk c, into out[(o·split + c)·inner + i]. split == 1, chunk == n is the plain sum.
template <class In, class Out>
__global__ void sum_cols_kernel(const In* x, int64_t outer, int64_t n, int64_t inner, int64_t split,
                                int64_t chunk, Out* out) {
  int64_t total = outer * split * inner;
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < total;
       k += int64_t(gridDim.x) * blockDim.x) {
    int64_t i = k % inner, oc = k / inner;
    int64_t c = oc % split, o = oc / split;
    int64_t begin = c * chunk, end = min(n, begin + chunk);
    const In* base = x + o * n * inner + i;
    double acc = 0;
    for (int64_t r = begin; r < end; ++r) acc += double(base[r * inner]);
    out[k] = Out(acc);
  }
}

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// Rows: a row gets one block; split long rows when there are too few rows to fill the GPU.
constexpr int64_t kRowChunk = 16384;
constexpr int64_t kFewRows = 1024;
// Columns: a column gets one thread; split when there are too few columns, in chunks of about
// √reduced rows so both passes walk about √reduced elements per thread.
constexpr int64_t kFewColumns = 32768;
constexpr int64_t kMinColumnSplit = 1024;

template <class T>
void sum_axis_typed(const T* x, int64_t outer, int64_t reduced, int64_t inner, T* out, int dev) {
  cudaStream_t s = stream(dev);
  if (inner == 1) {
    int64_t split = outer < kFewRows && reduced > 2 * kRowChunk ? ceil_div(reduced, kRowChunk) : 1;
    if (split == 1) {
      sum_rows_kernel<T, T><<<blocks_for_rows(outer), threads_for_row(reduced), 0, s>>>(
          x, outer, reduced, 1, reduced, out);
      FREIGHT_CUDA_CHECK_LAUNCH();
      return;
    }
    Tensor partial = Tensor::empty({outer, split}, DType::F64, Device::cuda(dev));
    double* p = static_cast<double*>(partial.data_ptr());
    sum_rows_kernel<T, double>
        <<<blocks_for_rows(outer * split), 256, 0, s>>>(x, outer, reduced, split, kRowChunk, p);
    FREIGHT_CUDA_CHECK_LAUNCH();
    sum_rows_kernel<double, T>
        <<<blocks_for_rows(outer), threads_for_row(split), 0, s>>>(p, outer, split, 1, split, out);
    FREIGHT_CUDA_CHECK_LAUNCH();
    // `partial` goes back to the caching allocator here; only later work on the same stream can
    // reuse it, after these kernels.
    return;
  }
  int64_t split = 1, chunk = reduced;
  if (outer * inner < kFewColumns && reduced >= kMinColumnSplit) {
    chunk = 1;
    while (chunk * chunk < reduced) chunk *= 2;  // the power of two at or above √reduced
    split = ceil_div(reduced, chunk);
  }
  if (split == 1) {
    sum_cols_kernel<T, T>
        <<<blocks_for(outer * inner), 256, 0, s>>>(x, outer, reduced, inner, 1, reduced, out);
    FREIGHT_CUDA_CHECK_LAUNCH();
    return;
  }
  Tensor partial = Tensor::empty({outer, split, inner}, DType::F64, Device::cuda(dev));
  double* p = static_cast<double*>(partial.data_ptr());
  sum_cols_kernel<T, double>
      <<<blocks_for(outer * split * inner), 256, 0, s>>>(x, outer, reduced, inner, split, chunk, p);
  FREIGHT_CUDA_CHECK_LAUNCH();
  sum_cols_kernel<double, T>
      <<<blocks_for(outer * inner), 256, 0, s>>>(p, outer, split, inner, 1, split, out);
  FREIGHT_CUDA_CHECK_LAUNCH();
}

void sum_axis_cuda(const Tensor& x, int64_t outer, int64_t reduced, int64_t inner, Tensor& out) {
  FREIGHT_CHECK(x.is_contiguous() && out.is_contiguous(),
                "sum_axis (cuda): operands must be contiguous");
  if (outer * inner == 0) return;  // nothing to write
  int dev = out.device().index;
  set_device(dev);
  dispatch_floating(x.dtype(), "sum_axis", [&](auto tag) {
    using T = decltype(tag);
    sum_axis_typed(static_cast<const T*>(x.data_ptr()), outer, reduced, inner,
                   static_cast<T*>(out.data_ptr()), dev);
  });
}

template <class T>
__global__ void argmax_kernel(const T* x, int64_t outer, int64_t reduced, int64_t inner,
                              int64_t* out) {
  int64_t total = outer * inner;
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < total;
       k += int64_t(gridDim.x) * blockDim.x) {
    int64_t o = k / inner, i = k % inner;
    const T* base = x + o * reduced * inner + i;
    int64_t best = 0;
    T bv = base[0];
    for (int64_t r = 1; r < reduced; ++r) {
      T v = base[r * inner];
      if (argmax_replaces(v, bv)) bv = v, best = r;
    }
    out[k] = best;
  }
}

void argmax_axis_cuda(const Tensor& x, int64_t outer, int64_t reduced, int64_t inner, Tensor& out) {
  FREIGHT_CHECK(x.is_contiguous() && out.is_contiguous() && out.dtype() == DType::I64,
                "argmax_axis (cuda): operands must be contiguous and the output int64");
  FREIGHT_CHECK(reduced > 0, "argmax_axis (cuda): the reduced axis is empty");
  int64_t total = outer * inner;
  if (total == 0) return;
  int dev = out.device().index;
  set_device(dev);
  int64_t* o = static_cast<int64_t*>(out.data_ptr());
  auto launch = [&](auto tag) {
    using T = decltype(tag);
    argmax_kernel<T><<<blocks_for(total), 256, 0, stream(dev)>>>(
        static_cast<const T*>(x.data_ptr()), outer, reduced, inner, o);
    FREIGHT_CUDA_CHECK_LAUNCH();
  };
  switch (x.dtype()) {  // every dtype the CPU kernel takes
    case DType::F32:
      launch(float{});
      return;
    case DType::F64:
      launch(double{});
      return;
    case DType::I32:
      launch(int32_t{});
      return;
    case DType::I64:
      launch(int64_t{});
      return;
    case DType::U8:
      launch(uint8_t{});
      return;
    default:
      unsupported_dtype("argmax_axis", x.dtype(), "float32, float64, int32, int64, uint8");
  }
}

}  // namespace

FREIGHT_REGISTER_KERNEL(kernels::sum_axis, CUDA, sum_axis_cuda);
FREIGHT_REGISTER_KERNEL(kernels::argmax_axis, CUDA, argmax_axis_cuda);

}  // namespace freight::cuda
