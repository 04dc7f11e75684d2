// 2-D convolution on the GPU (NCHW, no groups) through cuDNN's convolution API:
//   forward          cudnnConvolutionForward        y  = x ⋆ w            (cross-correlation)
//   input gradient   cudnnConvolutionBackwardData   gx = the transposed convolution of gy by w
//   weight gradient  cudnnConvolutionBackwardFilter gw = Σ_images gy ⋆ x
// The bias is added to y, and its gradient summed from gy, by two small kernels of our own:
//   bias add:  one thread per element of y, 256 per block, grid-stride; a fused ReLU
//              (conv2d_relu) is applied in the same pass.
//   bias grad: the sum of gy over images and pixels per output channel, split over many
//              blocks per channel and combined in a fixed order (channel_reduce.cuh:
//              reproducible, no atomics), in double.
// Without input channels (c = 0) the convolution is empty: y is the bias (or 0) and the weight
// gradient has no elements; cuDNN is not called.
//
// Plans: the descriptors of a geometry and dtype are built once and kept, with, per pass, the
// algorithm chosen the first time that pass runs (cudnnGetConvolution*Algorithm_v7, i.e.
// cuDNN's heuristics, no benchmarking) and its workspace size. The key also holds the two
// settings that restrict the choice, so changing either makes new choices:
//  * deterministic mode (cuda::deterministic(), set through freight::set_deterministic): only
//    algorithms cuDNN reports as deterministic (for the backward passes that excludes
//    BWD_DATA_ALGO_0 and BWD_FILTER_ALGO_0/3, which accumulate with atomics);
//  * float32 math: unless float32 GEMMs run in TF32 (gemm_math_mode: freight::precision() TF32
//    or BF16, or set_gemm_math_mode), a float32 convolution uses CUDNN_FMA_MATH and never a
//    tensor-op algorithm, so it rounds as plain FP32 arithmetic does (CUDNN_DEFAULT_MATH would
//    let Ampere and later GPUs use TF32). Under BF16 convolutions run as under TF32 (float32
//    data, tensor-op math allowed): bfloat16 descriptors are not done yet.
// Candidates come in cuDNN's order of expected speed; the first that succeeds, passes the
// restrictions, is accepted by cudnnGetConvolution*WorkspaceSize with the math type it was
// proposed with, and needs at most 1 GiB of workspace is taken; when none qualifies, the
// deterministic algorithm of the pass (IMPLICIT_GEMM, BWD_DATA_ALGO_1, BWD_FILTER_ALGO_1) is
// tried, and failing that the call throws, naming the geometry.
//
// Workspaces come from the caching allocator (a tensor of bytes, returned after the call: only
// later work on the stream can reuse it). The handle is the device's, set to its stream at each
// call. Outputs are written with beta = 0, which cuDNN documents as not reading them, so NaN
// poison in a fresh output cannot leak in. Operands whose address is not 16-byte aligned (a
// packed view at an odd offset) are copied to a fresh buffer first.
#include <climits>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "backend/cuda/block_reduce.cuh"
#include "backend/cuda/channel_reduce.cuh"
#include "backend/cuda/conv_plan_cache.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_context.h"
#include "backend/cuda/cudnn_context.h"
#include "backend/cuda/dispatch.h"
#include "backend/cuda/unary_rules.cuh"
#include "ops/kernels/conv.h"
#include "ops/kernels/elementwise.h"

namespace freight::cuda {
namespace {

// ---------------------------------------------------------------- bias kernels
template <class T>
__global__ void bias_forward_kernel(const T* bias, int64_t channels, int64_t plane, int64_t total,
                                    bool accumulate, bool relu, T* y) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total;
       e += int64_t(gridDim.x) * blockDim.x) {
    const T b = bias ? bias[(e / plane) % channels] : T(0);
    const T v = accumulate ? y[e] + b : b;
    y[e] = relu ? relu_value(v) : v;  // relu's own rule
  }
}

// Part sums of gy for block b = channel·parts + part.
template <class T>
__global__ void bias_grad_parts_kernel(const T* gy, int64_t images, int64_t channels, int64_t plane,
                                       ChannelSplit sp, double* partial) {
  __shared__ double scratch[32];
  const int64_t m = images * plane;
  for (int64_t b = blockIdx.x; b < channels * sp.parts; b += gridDim.x) {  // uniform per block
    const int64_t ch = b / sp.parts, lo = (b % sp.parts) * sp.chunk;
    const int64_t hi = lo + sp.chunk < m ? lo + sp.chunk : m;
    double acc = 0;
    for (int64_t q = lo + threadIdx.x; q < hi; q += blockDim.x)
      acc += double(gy[channel_offset(q, ch, channels, plane)]);
    acc = block_reduce(acc, 0.0, SumOp{}, scratch);
    if (threadIdx.x == 0) partial[b] = acc;
  }
}

template <class T>
__global__ void bias_grad_finish_kernel(const double* partial, int64_t channels, int64_t parts,
                                        T* gb) {
  for (int64_t ch = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; ch < channels;
       ch += int64_t(gridDim.x) * blockDim.x) {
    double acc = 0;
    for (int64_t p = 0; p < parts; ++p) acc += partial[ch * parts + p];  // part order
    gb[ch] = T(acc);
  }
}

// ---------------------------------------------------------------- plans
enum Pass { kForward = 0, kBackwardData = 1, kBackwardFilter = 2 };
const char* const kPassNames[3] = {"forward", "backward data", "backward filter"};

constexpr size_t kMaxWorkspace = size_t(1) << 30;

struct ConvKey {
  int64_t v[17];
  bool operator==(const ConvKey& o) const { return std::memcmp(v, o.v, sizeof v) == 0; }
};
struct ConvKeyHash {
  size_t operator()(const ConvKey& k) const {
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the fields
    for (int64_t x : k.v) h = (h ^ uint64_t(x)) * 1099511628211ull;
    return size_t(h);
  }
};

struct ChosenAlgo {
  bool chosen = false;
  int algo = 0;
  size_t workspace = 0;
};

// Descriptors of one geometry and dtype: x [n, c, h, w], y [n, o, oh, ow], w [o, c, kh, kw], and
// one convolution descriptor per pass (each carries the math type of its pass's algorithm).
struct ConvPlan {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv[3] = {nullptr, nullptr, nullptr};
  ChosenAlgo algo[3];
  bool strict_fp32 = false;
  ConvPlan() = default;
  ConvPlan(const ConvPlan&) = delete;
  ConvPlan& operator=(const ConvPlan&) = delete;
  ~ConvPlan() {  // (only on a failed construction: the cache keeps its plans for good)
    if (x) cudnnDestroyTensorDescriptor(x);
    if (y) cudnnDestroyTensorDescriptor(y);
    if (w) cudnnDestroyFilterDescriptor(w);
    for (auto c : conv)
      if (c) cudnnDestroyConvolutionDescriptor(c);
  }
};

struct PlanCache {
  std::mutex mu;
  std::unordered_map<ConvKey, std::unique_ptr<ConvPlan>, ConvKeyHash> plans;
  int64_t choices = 0;
  int last_choice[3] = {-1, -1, -1};
};
PlanCache& plan_cache() {
  static PlanCache* cache = new PlanCache();  // lives as long as the process
  return *cache;
}

std::string geometry_text(const Conv2dGeometry& g, DType dtype) {
  return "input [" + std::to_string(g.n) + ", " + std::to_string(g.c) + ", " + std::to_string(g.h) +
         ", " + std::to_string(g.w) + "], weight [" + std::to_string(g.o) + ", " +
         std::to_string(g.c) + ", " + std::to_string(g.kh) + ", " + std::to_string(g.kw) +
         "], stride (" + std::to_string(g.sh) + ", " + std::to_string(g.sw) + "), padding (" +
         std::to_string(g.ph) + ", " + std::to_string(g.pw) + "), dilation (" +
         std::to_string(g.dh) + ", " + std::to_string(g.dw) + "), " + dtype_name(dtype);
}

int to_int(int64_t v, const Conv2dGeometry& g, DType dtype) {
  FREIGHT_CHECK(v >= 0 && v <= INT_MAX, "conv2d (cuda): a size exceeds cuDNN's 32-bit sizes (" +
                                            geometry_text(g, dtype) + ")");
  return int(v);
}

bool strict_fp32(DType dtype) {
  return dtype == DType::F32 && gemm_math_mode(DType::F32) != CUBLAS_TF32_TENSOR_OP_MATH;
}

std::unique_ptr<ConvPlan> make_plan(const Conv2dGeometry& g, DType dtype) {
  auto p = std::make_unique<ConvPlan>();
  const cudnnDataType_t dt = dtype == DType::F32 ? CUDNN_DATA_FLOAT : CUDNN_DATA_DOUBLE;
  auto I = [&](int64_t v) { return to_int(v, g, dtype); };
  // Every tensor must also be addressable with 32-bit element offsets.
  for (int64_t count : {g.n * g.c * g.h * g.w, g.n * g.o * g.oh * g.ow, g.o * g.c * g.kh * g.kw})
    I(count);
  p->strict_fp32 = strict_fp32(dtype);
  FREIGHT_CUDA_CHECK(cudnnCreateTensorDescriptor(&p->x));
  FREIGHT_CUDA_CHECK(
      cudnnSetTensor4dDescriptor(p->x, CUDNN_TENSOR_NCHW, dt, I(g.n), I(g.c), I(g.h), I(g.w)));
  FREIGHT_CUDA_CHECK(cudnnCreateTensorDescriptor(&p->y));
  FREIGHT_CUDA_CHECK(
      cudnnSetTensor4dDescriptor(p->y, CUDNN_TENSOR_NCHW, dt, I(g.n), I(g.o), I(g.oh), I(g.ow)));
  FREIGHT_CUDA_CHECK(cudnnCreateFilterDescriptor(&p->w));
  FREIGHT_CUDA_CHECK(
      cudnnSetFilter4dDescriptor(p->w, dt, CUDNN_TENSOR_NCHW, I(g.o), I(g.c), I(g.kh), I(g.kw)));
  for (auto& c : p->conv) {
    FREIGHT_CUDA_CHECK(cudnnCreateConvolutionDescriptor(&c));
    // PyTorch's conv2d is a cross-correlation (CUDNN_CONVOLUTION would flip the kernel).
    FREIGHT_CUDA_CHECK(cudnnSetConvolution2dDescriptor(
        c, I(g.ph), I(g.pw), I(g.sh), I(g.sw), I(g.dh), I(g.dw), CUDNN_CROSS_CORRELATION, dt));
    FREIGHT_CUDA_CHECK(
        cudnnSetConvolutionMathType(c, p->strict_fp32 ? CUDNN_FMA_MATH : CUDNN_DEFAULT_MATH));
  }
  // cuDNN's own output shape must be the op's (a mismatch would mean wrong descriptors here).
  int n = 0, o = 0, oh = 0, ow = 0;
  FREIGHT_CUDA_CHECK(
      cudnnGetConvolution2dForwardOutputDim(p->conv[0], p->x, p->w, &n, &o, &oh, &ow));
  FREIGHT_CHECK(n == g.n && o == g.o && oh == g.oh && ow == g.ow,
                "conv2d (cuda): cuDNN computes an output of [" + std::to_string(n) + ", " +
                    std::to_string(o) + ", " + std::to_string(oh) + ", " + std::to_string(ow) +
                    "] for " + geometry_text(g, dtype) + ", not the expected [" +
                    std::to_string(g.n) + ", " + std::to_string(g.o) + ", " + std::to_string(g.oh) +
                    ", " + std::to_string(g.ow) + "]");
  return p;
}

// One heuristic proposal, whatever its pass.
struct Candidate {
  int algo;
  cudnnStatus_t status;
  cudnnDeterminism_t determinism;
  cudnnMathType_t math;
};

template <class Perf>
Candidate candidate_of(const Perf& r) {
  return {int(r.algo), r.status, r.determinism, r.mathType};
}

// Workspace bytes of `algo` for the pass under the pass's descriptor as it is now.
cudnnStatus_t workspace_size(cudnnHandle_t h, const ConvPlan& p, Pass pass, int algo,
                             size_t* bytes) {
  switch (pass) {
    case kForward:
      return cudnnGetConvolutionForwardWorkspaceSize(h, p.x, p.w, p.conv[kForward], p.y,
                                                     cudnnConvolutionFwdAlgo_t(algo), bytes);
    case kBackwardData:
      return cudnnGetConvolutionBackwardDataWorkspaceSize(
          h, p.w, p.y, p.conv[kBackwardData], p.x, cudnnConvolutionBwdDataAlgo_t(algo), bytes);
    default:
      return cudnnGetConvolutionBackwardFilterWorkspaceSize(
          h, p.x, p.y, p.conv[kBackwardFilter], p.w, cudnnConvolutionBwdFilterAlgo_t(algo), bytes);
  }
}

// cuDNN's proposals for the pass, fastest expected first.
int propose(cudnnHandle_t h, const ConvPlan& p, Pass pass, Candidate* out, int capacity) {
  int count = 0;
  if (pass == kForward) {
    cudnnConvolutionFwdAlgoPerf_t r[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    FREIGHT_CUDA_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(
        h, p.x, p.w, p.conv[kForward], p.y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &count, r));
    for (int i = 0; i < count && i < capacity; ++i) out[i] = candidate_of(r[i]);
  } else if (pass == kBackwardData) {
    cudnnConvolutionBwdDataAlgoPerf_t r[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    FREIGHT_CUDA_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(
        h, p.w, p.y, p.conv[kBackwardData], p.x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &count, r));
    for (int i = 0; i < count && i < capacity; ++i) out[i] = candidate_of(r[i]);
  } else {
    cudnnConvolutionBwdFilterAlgoPerf_t r[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    FREIGHT_CUDA_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
        h, p.x, p.y, p.conv[kBackwardFilter], p.w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &count,
        r));
    for (int i = 0; i < count && i < capacity; ++i) out[i] = candidate_of(r[i]);
  }
  return count < capacity ? count : capacity;
}

// The deterministic algorithm of each pass, tried when no proposal qualifies.
int fallback_algo(Pass pass) {
  switch (pass) {
    case kForward:
      return CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
    case kBackwardData:
      return CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
    default:
      return CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1;
  }
}

// Chooses the pass's algorithm (see the file comment); call with the cache's lock held.
ChosenAlgo choose(cudnnHandle_t h, ConvPlan& p, Pass pass, bool det, const Conv2dGeometry& g,
                  DType dtype) {
  cudnnConvolutionDescriptor_t desc = p.conv[pass];
  const cudnnMathType_t base = p.strict_fp32 ? CUDNN_FMA_MATH : CUDNN_DEFAULT_MATH;
  auto allowed_math = [&](cudnnMathType_t m) {
    if (m == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) return false;  // would round to half
    return !p.strict_fp32 || m == CUDNN_FMA_MATH || m == CUDNN_DEFAULT_MATH;
  };
  // Tries `algo` under math type `math`: its workspace when cuDNN accepts it.
  auto accepts = [&](int algo, cudnnMathType_t math, size_t* bytes) {
    FREIGHT_CUDA_CHECK(cudnnSetConvolutionMathType(desc, math));
    return workspace_size(h, p, pass, algo, bytes) == CUDNN_STATUS_SUCCESS &&
           *bytes <= kMaxWorkspace;
  };
  Candidate c[8];
  const int count = propose(h, p, pass, c, 8);
  for (int i = 0; i < count; ++i) {
    if (c[i].status != CUDNN_STATUS_SUCCESS) continue;
    if (det && c[i].determinism != CUDNN_DETERMINISTIC) continue;
    if (!allowed_math(c[i].math)) continue;
    // A strict float32 plan stays on FMA math whatever the proposal says.
    const cudnnMathType_t math = p.strict_fp32 ? CUDNN_FMA_MATH : c[i].math;
    size_t bytes = 0;
    if (accepts(c[i].algo, math, &bytes)) return {true, c[i].algo, bytes};
  }
  size_t bytes = 0;
  if (accepts(fallback_algo(pass), base, &bytes)) return {true, fallback_algo(pass), bytes};
  throw Error(std::string("conv2d (cuda): cuDNN offers no usable ") + kPassNames[pass] +
              " algorithm" + (det ? " in deterministic mode" : "") +
              (p.strict_fp32 ? " with FP32 (FMA) math" : "") + " for " + geometry_text(g, dtype));
}

struct Prepared {
  const ConvPlan* plan;
  int algo;
  size_t workspace;
};

// The plan of (g, dtype) on `dev` with the algorithm of `pass` chosen.
Prepared prepare(cudnnHandle_t h, const Conv2dGeometry& g, DType dtype, int dev, Pass pass) {
  const bool det = deterministic();
  const ConvKey key{{int64_t(dev), int64_t(dtype), g.n, g.c, g.h, g.w, g.o, g.kh, g.kw, g.sh, g.sw,
                     g.ph, g.pw, g.dh, g.dw, int64_t(det), int64_t(strict_fp32(dtype))}};
  PlanCache& cache = plan_cache();
  std::lock_guard<std::mutex> lock(cache.mu);
  std::unique_ptr<ConvPlan>& slot = cache.plans[key];
  if (!slot) {
    std::unique_ptr<ConvPlan> made;
    try {
      made = make_plan(g, dtype);
    } catch (...) {
      cache.plans.erase(key);
      throw;
    }
    slot = std::move(made);
  }
  ConvPlan& p = *slot;
  if (!p.algo[pass].chosen) {
    p.algo[pass] = choose(h, p, pass, det, g, dtype);
    ++cache.choices;
    cache.last_choice[pass] = p.algo[pass].algo;
  }
  return {&p, p.algo[pass].algo, p.algo[pass].workspace};
}

// ---------------------------------------------------------------- calls
cudnnHandle_t handle_on_stream(int dev) {
  cudnnHandle_t h = cudnn(dev);
  FREIGHT_CUDA_CHECK(cudnnSetStream(h, stream(dev)));
  return h;
}

bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// `t` itself, or a packed copy at a fresh (aligned) address.
Tensor aligned_operand(const Tensor& t) {
  if (aligned16(t.data_ptr())) return t;
  Tensor copy = Tensor::empty(t.shape(), t.dtype(), t.device());
  kernels::copy(DeviceType::CUDA, t, copy);
  return copy;
}

void check_output(const Tensor& t, const char* kernel) {
  FREIGHT_CHECK(t.is_contiguous() && aligned16(t.data_ptr()),
                std::string(kernel) +
                    " (cuda): outputs must be packed tensors the op allocated (16-byte aligned)");
}

// Workspace bytes from the caching allocator (an undefined tensor for 0 bytes).
Tensor workspace(size_t bytes, int dev) {
  if (bytes == 0) return Tensor();
  return Tensor::empty({int64_t(bytes)}, DType::U8, Device::cuda(dev));
}
void* data_or_null(const Tensor& t) {
  return t.defined() ? t.data_ptr() : nullptr;
}

template <class T>
void add_bias(const Tensor& bias, const Conv2dGeometry& g, bool accumulate, bool relu, Tensor& y,
              int dev) {
  const int64_t total = g.n * g.o * g.oh * g.ow;
  bias_forward_kernel<T><<<blocks_for(total), 256, 0, stream(dev)>>>(
      bias.defined() ? static_cast<const T*>(bias.data_ptr()) : nullptr, g.o, g.oh * g.ow, total,
      accumulate, relu, static_cast<T*>(y.data_ptr()));
  FREIGHT_CUDA_CHECK_LAUNCH();
}

void forward_cuda(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dGeometry& g,
                  bool relu, Tensor& y) {
  FREIGHT_CHECK(x.is_contiguous() && w.is_contiguous() && (!b.defined() || b.is_contiguous()),
                "conv2d_forward (cuda): operands must be contiguous");
  check_output(y, "conv2d_forward");
  if (y.numel() == 0) return;
  const int dev = y.device().index;
  set_device(dev);
  dispatch_floating(x.dtype(), "conv2d_forward", [&](auto tag) {
    using T = decltype(tag);
    if (g.c == 0) {  // no input channels: the output is the bias
      add_bias<T>(b, g, false, relu, y, dev);
      return;
    }
    cudnnHandle_t h = handle_on_stream(dev);
    const Prepared pr = prepare(h, g, x.dtype(), dev, kForward);
    Tensor xa = aligned_operand(x), wa = aligned_operand(w);
    Tensor ws = workspace(pr.workspace, dev);
    const T one = 1, zero = 0;  // scaling factors: float for float data, double for double
    FREIGHT_CUDA_CHECK(cudnnConvolutionForward(h, &one, pr.plan->x, xa.data_ptr(), pr.plan->w,
                                               wa.data_ptr(), pr.plan->conv[kForward],
                                               cudnnConvolutionFwdAlgo_t(pr.algo), data_or_null(ws),
                                               pr.workspace, &zero, pr.plan->y, y.data_ptr()));
    // The bias and a fused ReLU in one pass over cuDNN's output.
    if (b.defined() || relu) add_bias<T>(b, g, true, relu, y, dev);
  });
}

void backward_input_cuda(const Tensor& gy, const Tensor& w, const Conv2dGeometry& g, Tensor& gx) {
  FREIGHT_CHECK(gy.is_contiguous() && w.is_contiguous(),
                "conv2d_backward_input (cuda): operands must be contiguous");
  check_output(gx, "conv2d_backward_input");
  if (gx.numel() == 0) return;  // (c = 0 lands here too)
  const int dev = gx.device().index;
  set_device(dev);
  dispatch_floating(gy.dtype(), "conv2d_backward_input", [&](auto tag) {
    using T = decltype(tag);
    cudnnHandle_t h = handle_on_stream(dev);
    const Prepared pr = prepare(h, g, gy.dtype(), dev, kBackwardData);
    Tensor gya = aligned_operand(gy), wa = aligned_operand(w);
    Tensor ws = workspace(pr.workspace, dev);
    const T one = 1, zero = 0;
    FREIGHT_CUDA_CHECK(cudnnConvolutionBackwardData(
        h, &one, pr.plan->w, wa.data_ptr(), pr.plan->y, gya.data_ptr(),
        pr.plan->conv[kBackwardData], cudnnConvolutionBwdDataAlgo_t(pr.algo), data_or_null(ws),
        pr.workspace, &zero, pr.plan->x, gx.data_ptr()));
  });
}

void backward_weight_cuda(const Tensor& gy_in, const Tensor& x, const Conv2dGeometry& g,
                          const Tensor& relu_output, Tensor& gw, Tensor& gb) {
  const bool want_w = gw.defined() && gw.numel() > 0, want_b = gb.defined();
  if (!want_w && !want_b) return;
  Tensor gy = gy_in;
  if (relu_output.defined() && gy.numel() > 0) {  // a fused ReLU's mask, as a pass of its own
    FREIGHT_CHECK(relu_output.is_contiguous() && relu_output.numel() == gy.numel(),
                  "conv2d_backward_weight (cuda): the ReLU's output must be packed like gy");
    gy = Tensor::empty(gy_in.shape(), gy_in.dtype(), gy_in.device());
    kernels::unary_backward(DeviceType::CUDA, UnaryOp::Relu, relu_output, relu_output, gy_in, gy);
  }
  FREIGHT_CHECK(gy.is_contiguous() && (!want_w || x.is_contiguous()),
                "conv2d_backward_weight (cuda): operands must be contiguous");
  if (want_w) check_output(gw, "conv2d_backward_weight");
  if (want_b) check_output(gb, "conv2d_backward_weight");
  const int dev = (want_w ? gw : gb).device().index;
  set_device(dev);
  const bool empty_sum = g.n * g.oh * g.ow == 0;  // no output pixels: the gradients are 0
  dispatch_floating(gy.dtype(), "conv2d_backward_weight", [&](auto tag) {
    using T = decltype(tag);
    if (want_w && empty_sum) {
      kernels::fill(DeviceType::CUDA, gw, 0.0);
    } else if (want_w) {
      cudnnHandle_t h = handle_on_stream(dev);
      const Prepared pr = prepare(h, g, gy.dtype(), dev, kBackwardFilter);
      Tensor xa = aligned_operand(x), gya = aligned_operand(gy);
      Tensor ws = workspace(pr.workspace, dev);
      const T one = 1, zero = 0;
      FREIGHT_CUDA_CHECK(cudnnConvolutionBackwardFilter(
          h, &one, pr.plan->x, xa.data_ptr(), pr.plan->y, gya.data_ptr(),
          pr.plan->conv[kBackwardFilter], cudnnConvolutionBwdFilterAlgo_t(pr.algo),
          data_or_null(ws), pr.workspace, &zero, pr.plan->w, gw.data_ptr()));
    }
    if (want_b && g.o > 0) {
      const int64_t plane = g.oh * g.ow;
      const unsigned threads = threads_for_row(g.n * plane);
      const ChannelSplit sp = channel_split(g.o, g.n * plane, threads);
      Tensor partial = Tensor::empty({g.o * sp.parts}, DType::F64, gy.device());
      bias_grad_parts_kernel<T><<<blocks_for_rows(g.o * sp.parts), threads, 0, stream(dev)>>>(
          static_cast<const T*>(gy.data_ptr()), g.n, g.o, plane, sp,
          static_cast<double*>(partial.data_ptr()));
      FREIGHT_CUDA_CHECK_LAUNCH();
      bias_grad_finish_kernel<T>
          <<<blocks_for(g.o), 256, 0, stream(dev)>>>(static_cast<const double*>(partial.data_ptr()),
                                                     g.o, sp.parts, static_cast<T*>(gb.data_ptr()));
      FREIGHT_CUDA_CHECK_LAUNCH();
    }
  });
}

}  // namespace

ConvPlanCacheStats conv_plan_cache_stats() {
  PlanCache& cache = plan_cache();
  std::lock_guard<std::mutex> lock(cache.mu);
  ConvPlanCacheStats s;
  s.plans = int64_t(cache.plans.size());
  s.choices = cache.choices;
  for (int pass = 0; pass < 3; ++pass) s.last_choice[pass] = cache.last_choice[pass];
  return s;
}

FREIGHT_REGISTER_KERNEL(kernels::conv2d_forward, CUDA, forward_cuda);
FREIGHT_REGISTER_KERNEL(kernels::conv2d_backward_input, CUDA, backward_input_cuda);
FREIGHT_REGISTER_KERNEL(kernels::conv2d_backward_weight, CUDA, backward_weight_cuda);

}  // namespace freight::cuda
