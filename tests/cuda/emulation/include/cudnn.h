// Emulated cuDNN: the legacy convolution calls Freight makes, for the CPU emulation in
// ../README.md. Convolutions are naive loops with the documented semantics
//   out = alpha · op(inputs) + beta · out   (beta = 0 never reads out),
// cross-correlation or convolution (flipped filter) as the descriptor says. What it checks of
// the caller's glue: descriptors set before use and consistent with each other (channels,
// output shape, data and compute types), the argument order of every call (the signatures are
// those of cudnn 9's headers), scaling factors read as float for float data and double for
// double data, algorithms actually supported, and workspaces at least as large as
// cudnnGetConvolution*WorkspaceSize said (every byte is written, so AddressSanitizer sees a short
// buffer). The checks happen at the call; the convolution itself is queued on the handle's
// stream (recorded when the stream is captured into a graph), like a kernel.
//
// The heuristics (cudnnGetConvolution*Algorithm_v7) propose, in this order, algorithms that a
// careful caller must sometimes refuse: for float data a tensor-op proposal first; for the
// backward passes non-deterministic algorithms first; and some NOT_SUPPORTED entries. Float
// data under CUDNN_DEFAULT_MATH or CUDNN_TENSOR_OP_MATH is computed with inputs rounded to TF32
// (as Ampere and later GPUs may do), so a float32 convolution that forgets CUDNN_FMA_MATH fails
// a 1e-4 comparison with the CPU. It cannot check cuDNN itself, its speed, or which
// algorithms the real heuristics propose.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "cuda_runtime.h"

typedef enum {
  CUDNN_STATUS_SUCCESS = 0,
  CUDNN_STATUS_NOT_INITIALIZED = 1001,
  CUDNN_STATUS_BAD_PARAM = 2000,
  CUDNN_STATUS_NOT_SUPPORTED = 3000,
  CUDNN_STATUS_EXECUTION_FAILED = 5000,
} cudnnStatus_t;
typedef enum { CUDNN_DATA_FLOAT = 0, CUDNN_DATA_DOUBLE = 1, CUDNN_DATA_HALF = 2 } cudnnDataType_t;
typedef enum { CUDNN_TENSOR_NCHW = 0, CUDNN_TENSOR_NHWC = 1 } cudnnTensorFormat_t;
typedef enum { CUDNN_CONVOLUTION = 0, CUDNN_CROSS_CORRELATION = 1 } cudnnConvolutionMode_t;
typedef enum {
  CUDNN_DEFAULT_MATH = 0,
  CUDNN_TENSOR_OP_MATH = 1,
  CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION = 2,
  CUDNN_FMA_MATH = 3,
} cudnnMathType_t;
typedef enum { CUDNN_NON_DETERMINISTIC = 0, CUDNN_DETERMINISTIC = 1 } cudnnDeterminism_t;
typedef enum {
  CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM = 0,
  CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM = 1,
  CUDNN_CONVOLUTION_FWD_ALGO_GEMM = 2,
  CUDNN_CONVOLUTION_FWD_ALGO_DIRECT = 3,
  CUDNN_CONVOLUTION_FWD_ALGO_FFT = 4,
  CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING = 5,
  CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD = 6,
  CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED = 7,
  CUDNN_CONVOLUTION_FWD_ALGO_COUNT = 8
} cudnnConvolutionFwdAlgo_t;
typedef enum {
  CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 = 0,
  CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1 = 1,
  CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT = 2,
  CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3 = 3,
  CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD = 4,
  CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED = 5,
  CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING = 6,
  CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT = 7
} cudnnConvolutionBwdFilterAlgo_t;
typedef enum {
  CUDNN_CONVOLUTION_BWD_DATA_ALGO_0 = 0,
  CUDNN_CONVOLUTION_BWD_DATA_ALGO_1 = 1,
  CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT = 2,
  CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING = 3,
  CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD = 4,
  CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED = 5,
  CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT = 6
} cudnnConvolutionBwdDataAlgo_t;

#define EMU_CUDNN_PERF(NAME, ALGO)  \
  typedef struct {                  \
    ALGO algo;                      \
    cudnnStatus_t status;           \
    float time;                     \
    size_t memory;                  \
    cudnnDeterminism_t determinism; \
    cudnnMathType_t mathType;       \
    int reserved[3];                \
  } NAME;
EMU_CUDNN_PERF(cudnnConvolutionFwdAlgoPerf_t, cudnnConvolutionFwdAlgo_t)
EMU_CUDNN_PERF(cudnnConvolutionBwdDataAlgoPerf_t, cudnnConvolutionBwdDataAlgo_t)
EMU_CUDNN_PERF(cudnnConvolutionBwdFilterAlgoPerf_t, cudnnConvolutionBwdFilterAlgo_t)

struct cudnnContext {
  cudaStream_t stream = nullptr;
};
struct cudnnTensorStruct {
  bool set = false;
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  int n = 0, c = 0, h = 0, w = 0;
};
struct cudnnFilterStruct {
  bool set = false;
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  int k = 0, c = 0, h = 0, w = 0;
};
struct cudnnConvolutionStruct {
  bool set = false;
  int pad_h = 0, pad_w = 0, u = 1, v = 1, dil_h = 1, dil_w = 1;
  cudnnConvolutionMode_t mode = CUDNN_CONVOLUTION;
  cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
};
typedef cudnnContext* cudnnHandle_t;
typedef cudnnTensorStruct* cudnnTensorDescriptor_t;
typedef cudnnFilterStruct* cudnnFilterDescriptor_t;
typedef cudnnConvolutionStruct* cudnnConvolutionDescriptor_t;

namespace emu {
inline char g_cudnn_error[256] = "";
inline cudnnStatus_t cudnn_fail(cudnnStatus_t s, const char* why) {
  std::snprintf(g_cudnn_error, sizeof g_cudnn_error, "emulated cuDNN: %s", why);
  return s;
}
}  // namespace emu

inline const char* cudnnGetErrorString(cudnnStatus_t s) {
  switch (s) {
    case CUDNN_STATUS_SUCCESS:
      return "CUDNN_STATUS_SUCCESS";
    case CUDNN_STATUS_BAD_PARAM:
      return "CUDNN_STATUS_BAD_PARAM";
    case CUDNN_STATUS_NOT_SUPPORTED:
      return "CUDNN_STATUS_NOT_SUPPORTED";
    default:
      return "CUDNN_STATUS_(emulated error)";
  }
}
inline void cudnnGetLastErrorString(char* message, size_t max_size) {
  if (max_size == 0) return;
  std::snprintf(message, max_size, "%s", emu::g_cudnn_error);
  emu::g_cudnn_error[0] = 0;
}
inline cudnnStatus_t cudnnCreate(cudnnHandle_t* h) {
  *h = new cudnnContext();
  return CUDNN_STATUS_SUCCESS;
}
inline cudnnStatus_t cudnnDestroy(cudnnHandle_t h) {
  delete h;
  return CUDNN_STATUS_SUCCESS;
}
inline cudnnStatus_t cudnnSetStream(cudnnHandle_t h, cudaStream_t s) {
  if (!h) return emu::cudnn_fail(CUDNN_STATUS_BAD_PARAM, "null handle");
  h->stream = s;
  return CUDNN_STATUS_SUCCESS;
}

#define EMU_CUDNN_CREATE_DESTROY(CREATE, DESTROY, TYPE, STRUCT) \
  inline cudnnStatus_t CREATE(TYPE* d) {                        \
    *d = new STRUCT();                                          \
    return CUDNN_STATUS_SUCCESS;                                \
  }                                                             \
  inline cudnnStatus_t DESTROY(TYPE d) {                        \
    delete d;                                                   \
    return CUDNN_STATUS_SUCCESS;                                \
  }
EMU_CUDNN_CREATE_DESTROY(cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor,
                         cudnnTensorDescriptor_t, cudnnTensorStruct)
EMU_CUDNN_CREATE_DESTROY(cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor,
                         cudnnFilterDescriptor_t, cudnnFilterStruct)
EMU_CUDNN_CREATE_DESTROY(cudnnCreateConvolutionDescriptor, cudnnDestroyConvolutionDescriptor,
                         cudnnConvolutionDescriptor_t, cudnnConvolutionStruct)

inline cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t d,
                                                cudnnTensorFormat_t format,
                                                cudnnDataType_t dataType, int n, int c, int h,
                                                int w) {
  if (format != CUDNN_TENSOR_NCHW) return emu::cudnn_fail(CUDNN_STATUS_NOT_SUPPORTED, "NHWC");
  if (n <= 0 || c <= 0 || h <= 0 || w <= 0)
    return emu::cudnn_fail(CUDNN_STATUS_BAD_PARAM, "tensor sizes must be positive");
  *d = {true, dataType, n, c, h, w};
  return CUDNN_STATUS_SUCCESS;
}
inline cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t d, cudnnDataType_t dataType,
                                                cudnnTensorFormat_t format, int k, int c, int h,
                                                int w) {
  if (format != CUDNN_TENSOR_NCHW) return emu::cudnn_fail(CUDNN_STATUS_NOT_SUPPORTED, "NHWC");
  if (k <= 0 || c <= 0 || h <= 0 || w <= 0)
    return emu::cudnn_fail(CUDNN_STATUS_BAD_PARAM, "filter sizes must be positive");
  *d = {true, dataType, k, c, h, w};
  return CUDNN_STATUS_SUCCESS;
}
inline cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t d, int pad_h,
                                                     int pad_w, int u, int v, int dilation_h,
                                                     int dilation_w, cudnnConvolutionMode_t mode,
                                                     cudnnDataType_t computeType) {
  if (pad_h < 0 || pad_w < 0 || u < 1 || v < 1 || dilation_h < 1 || dilation_w < 1)
    return emu::cudnn_fail(CUDNN_STATUS_BAD_PARAM, "bad padding, stride or dilation");
  cudnnMathType_t math = d->math;
  *d = {true, pad_h, pad_w, u, v, dilation_h, dilation_w, mode, computeType, math};
  return CUDNN_STATUS_SUCCESS;
}
inline cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t d,
                                                 cudnnMathType_t mathType) {
  d->math = mathType;
  return CUDNN_STATUS_SUCCESS;
}
inline cudnnStatus_t cudnnGetConvolution2dForwardOutputDim(const cudnnConvolutionDescriptor_t conv,
                                                           const cudnnTensorDescriptor_t x,
                                                           const cudnnFilterDescriptor_t w, int* n,
                                                           int* c, int* h, int* wo) {
  if (!conv->set || !x->set || !w->set)
    return emu::cudnn_fail(CUDNN_STATUS_BAD_PARAM, "descriptor not set");
  *n = x->n;
  *c = w->k;
  *h = (x->h + 2 * conv->pad_h - conv->dil_h * (w->h - 1) - 1) / conv->u + 1;
  *wo = (x->w + 2 * conv->pad_w - conv->dil_w * (w->w - 1) - 1) / conv->v + 1;
  return CUDNN_STATUS_SUCCESS;
}

namespace emu {

enum ConvPass { kFwd, kBwdData, kBwdFilter };

// Validates x, w, y against each other and conv; sizeof the data type in *elem.
inline cudnnStatus_t check_conv(const cudnnTensorStruct* x, const cudnnFilterStruct* w,
                                const cudnnConvolutionStruct* conv, const cudnnTensorStruct* y,
                                size_t* elem) {
  if (!x->set || !w->set || !conv->set || !y->set)
    return cudnn_fail(CUDNN_STATUS_BAD_PARAM, "descriptor not set");
  if (x->type != w->type || x->type != y->type)
    return cudnn_fail(CUDNN_STATUS_BAD_PARAM, "data types differ");
  if (x->type == CUDNN_DATA_FLOAT && conv->compute != CUDNN_DATA_FLOAT)
    return cudnn_fail(CUDNN_STATUS_NOT_SUPPORTED, "float data needs float compute");
  if (x->type == CUDNN_DATA_DOUBLE && conv->compute != CUDNN_DATA_DOUBLE)
    return cudnn_fail(CUDNN_STATUS_NOT_SUPPORTED, "double data needs double compute");
  if (x->type != CUDNN_DATA_FLOAT && x->type != CUDNN_DATA_DOUBLE)
    return cudnn_fail(CUDNN_STATUS_NOT_SUPPORTED, "emulated for float and double only");
  if (x->c != w->c) return cudnn_fail(CUDNN_STATUS_BAD_PARAM, "input channels differ");
  int n, c, h, wo;
  cudnnGetConvolution2dForwardOutputDim(const_cast<cudnnConvolutionStruct*>(conv),
                                        const_cast<cudnnTensorStruct*>(x),
                                        const_cast<cudnnFilterStruct*>(w), &n, &c, &h, &wo);
  if (y->n != n || y->c != c || y->h != h || y->w != wo)
    return cudnn_fail(CUDNN_STATUS_BAD_PARAM, "output descriptor does not match the convolution");
  *elem = x->type == CUDNN_DATA_FLOAT ? 4 : 8;
  return CUDNN_STATUS_SUCCESS;
}

inline bool tf32_math(const cudnnTensorStruct* x, const cudnnConvolutionStruct* conv) {
  return x->type == CUDNN_DATA_FLOAT &&
         (conv->math == CUDNN_DEFAULT_MATH || conv->math == CUDNN_TENSOR_OP_MATH ||
          conv->math == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION);
}

// Workspace bytes of an emulated algorithm; NOT_SUPPORTED for those the emulation lacks.
inline cudnnStatus_t workspace_bytes(ConvPass pass, int algo, const cudnnTensorStruct* x,
                                     const cudnnFilterStruct* w, const cudnnTensorStruct* y,
                                     size_t elem, size_t* bytes) {
  const size_t taps = size_t(w->c) * w->h * w->w;
  if (pass == kFwd) {
    if (algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM) return *bytes = 0, CUDNN_STATUS_SUCCESS;
    if (algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM)
      return *bytes = 256, CUDNN_STATUS_SUCCESS;
    if (algo == CUDNN_CONVOLUTION_FWD_ALGO_GEMM)  // an im2col buffer of one image
      return *bytes = elem * taps * size_t(y->h) * y->w, CUDNN_STATUS_SUCCESS;
  } else if (pass == kBwdData) {
    if (algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_0) return *bytes = 0, CUDNN_STATUS_SUCCESS;
    if (algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_1)
      return *bytes = elem * size_t(x->h) * x->w + 8, CUDNN_STATUS_SUCCESS;
  } else {
    if (algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 || algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3)
      return *bytes = 0, CUDNN_STATUS_SUCCESS;
    if (algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1)  // a partial filter gradient
      return *bytes = elem * size_t(w->k) * taps, CUDNN_STATUS_SUCCESS;
  }
  return cudnn_fail(CUDNN_STATUS_NOT_SUPPORTED, "algorithm not emulated");
}

inline cudnnStatus_t use_workspace(ConvPass pass, int algo, const cudnnTensorStruct* x,
                                   const cudnnFilterStruct* w, const cudnnTensorStruct* y,
                                   size_t elem, void* ws, size_t ws_bytes) {
  size_t need = 0;
  cudnnStatus_t s = workspace_bytes(pass, algo, x, w, y, elem, &need);
  if (s != CUDNN_STATUS_SUCCESS) return s;
  if (ws_bytes < need || (need > 0 && !ws))
    return cudnn_fail(CUDNN_STATUS_BAD_PARAM, "workspace smaller than the algorithm needs");
  return CUDNN_STATUS_SUCCESS;
}

inline float round_tf32(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  u = (u + 0x1000u) & 0xffffe000u;  // 10 explicit mantissa bits, rounded
  std::memcpy(&v, &u, 4);
  return v;
}

// The shared loop: for every (image, out channel, out pixel, in channel, tap) with its input
// pixel inside the image, fn(y index, x index, w index).
template <class Fn>
void for_each_tap(const cudnnTensorStruct* x, const cudnnFilterStruct* w,
                  const cudnnConvolutionStruct* conv, const cudnnTensorStruct* y, Fn fn) {
  for (int n = 0; n < y->n; ++n)
    for (int k = 0; k < y->c; ++k)
      for (int p = 0; p < y->h; ++p)
        for (int q = 0; q < y->w; ++q)
          for (int c = 0; c < x->c; ++c)
            for (int r = 0; r < w->h; ++r)
              for (int s = 0; s < w->w; ++s) {
                const int ih = p * conv->u - conv->pad_h + r * conv->dil_h;
                const int iw = q * conv->v - conv->pad_w + s * conv->dil_w;
                if (ih < 0 || ih >= x->h || iw < 0 || iw >= x->w) continue;
                // CUDNN_CONVOLUTION flips the filter; cross-correlation does not.
                const int fr = conv->mode == CUDNN_CONVOLUTION ? w->h - 1 - r : r;
                const int fs = conv->mode == CUDNN_CONVOLUTION ? w->w - 1 - s : s;
                const size_t yi = ((size_t(n) * y->c + k) * y->h + p) * y->w + q;
                const size_t xi = ((size_t(n) * x->c + c) * x->h + ih) * x->w + iw;
                const size_t wi = ((size_t(k) * w->c + c) * w->h + fr) * w->w + fs;
                fn(yi, xi, wi);
              }
}

template <class T>
void scale_into(const std::vector<double>& acc, const void* alpha, const void* beta, void* out) {
  const T a = *static_cast<const T*>(alpha), b = *static_cast<const T*>(beta);
  T* o = static_cast<T*>(out);
  for (size_t i = 0; i < acc.size(); ++i)
    o[i] = b == T(0) ? T(a * acc[i]) : T(a * acc[i] + b * o[i]);  // beta = 0: out not read
}

template <class T>
double value(const void* p, size_t i, bool tf32) {
  const T v = static_cast<const T*>(p)[i];
  if constexpr (sizeof(T) == 4) return tf32 ? round_tf32(v) : v;
  return double(v);
}

inline void compute_conv(ConvPass pass, const void* alpha, const void* beta,
                         const cudnnTensorStruct* xd, const void* x, const cudnnFilterStruct* wd,
                         const void* w, const cudnnConvolutionStruct* conv,
                         const cudnnTensorStruct* yd, const void* y, void* out, size_t elem) {
  const bool tf32 = tf32_math(xd, conv);
  const bool f32 = elem == 4;
  auto get = [&](const void* p, size_t i) {
    return f32 ? value<float>(p, i, tf32) : value<double>(p, i, false);
  };
  size_t count = pass == kFwd       ? size_t(yd->n) * yd->c * yd->h * yd->w
                 : pass == kBwdData ? size_t(xd->n) * xd->c * xd->h * xd->w
                                    : size_t(wd->k) * wd->c * wd->h * wd->w;
  std::vector<double> acc(count, 0.0);
  for_each_tap(xd, wd, conv, yd, [&](size_t yi, size_t xi, size_t wi) {
    if (pass == kFwd) acc[yi] += get(x, xi) * get(w, wi);
    if (pass == kBwdData) acc[xi] += get(y, yi) * get(w, wi);
    if (pass == kBwdFilter) acc[wi] += get(y, yi) * get(x, xi);
  });
  if (f32)
    scale_into<float>(acc, alpha, beta, out);
  else
    scale_into<double>(acc, alpha, beta, out);
}

// One pass, checked now and queued on the handle's stream. Operands: x, w, dy/y; `out` is y
// (forward), dx or dw. The descriptors and the scaling factors are copied now, as cuDNN reads them
// at the call.
inline cudnnStatus_t run_conv(cudnnHandle_t h, ConvPass pass, int algo, const void* alpha,
                              const void* beta, const cudnnTensorStruct* xd, const void* x,
                              const cudnnFilterStruct* wd, const void* w,
                              const cudnnConvolutionStruct* conv, const cudnnTensorStruct* yd,
                              const void* y, void* out, void* ws, size_t ws_bytes) {
  if (!h) return cudnn_fail(CUDNN_STATUS_BAD_PARAM, "null handle");
  size_t elem = 0;
  cudnnStatus_t s = check_conv(xd, wd, conv, yd, &elem);
  if (s != CUDNN_STATUS_SUCCESS) return s;
  s = use_workspace(pass, algo, xd, wd, yd, elem, ws, ws_bytes);
  if (s != CUDNN_STATUS_SUCCESS) return s;
  uint64_t alpha_bits = 0, beta_bits = 0;
  std::memcpy(&alpha_bits, alpha, elem);
  std::memcpy(&beta_bits, beta, elem);
  enqueue(
      h->stream,
      [=, xs = *xd, wf = *wd, cs = *conv, ys = *yd] {
        if (ws_bytes > 0) std::memset(ws, 0x5A, ws_bytes);  // touches all of it (AddressSanitizer)
        compute_conv(pass, &alpha_bits, &beta_bits, &xs, x, &wf, w, &cs, &ys, y, out, elem);
      },
      pass == kFwd       ? "cudnnConvolutionForward"
      : pass == kBwdData ? "cudnnConvolutionBackwardData"
                         : "cudnnConvolutionBackwardFilter");
  return CUDNN_STATUS_SUCCESS;
}

struct Proposal {
  int algo;
  cudnnStatus_t status;
  cudnnDeterminism_t det;
  bool tensor_op;
};

template <class Perf, class Algo>
cudnnStatus_t propose(ConvPass pass, const cudnnTensorStruct* x, const cudnnFilterStruct* w,
                      const cudnnConvolutionStruct* conv, const cudnnTensorStruct* y, int requested,
                      int* returned, Perf* out) {
  size_t elem = 0;
  cudnnStatus_t s = check_conv(x, w, conv, y, &elem);
  if (s != CUDNN_STATUS_SUCCESS) return s;
  if (requested < 1) return cudnn_fail(CUDNN_STATUS_BAD_PARAM, "requestedAlgoCount < 1");
  const bool f32 = x->type == CUDNN_DATA_FLOAT;
  std::vector<Proposal> list;
  if (pass == kFwd) {
    if (f32)
      list.push_back({CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, CUDNN_STATUS_SUCCESS,
                      CUDNN_DETERMINISTIC, true});
    list.push_back({CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED, CUDNN_STATUS_NOT_SUPPORTED,
                    CUDNN_DETERMINISTIC, false});
    list.push_back(
        {CUDNN_CONVOLUTION_FWD_ALGO_GEMM, CUDNN_STATUS_SUCCESS, CUDNN_DETERMINISTIC, false});
    list.push_back({CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, CUDNN_STATUS_SUCCESS,
                    CUDNN_DETERMINISTIC, false});
  } else if (pass == kBwdData) {
    list.push_back(
        {CUDNN_CONVOLUTION_BWD_DATA_ALGO_0, CUDNN_STATUS_SUCCESS, CUDNN_NON_DETERMINISTIC, false});
    list.push_back({CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT, CUDNN_STATUS_NOT_SUPPORTED,
                    CUDNN_DETERMINISTIC, false});
    list.push_back(
        {CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, CUDNN_STATUS_SUCCESS, CUDNN_DETERMINISTIC, false});
  } else {
    list.push_back({CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3, CUDNN_STATUS_SUCCESS,
                    CUDNN_NON_DETERMINISTIC, false});
    list.push_back({CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0, CUDNN_STATUS_SUCCESS,
                    CUDNN_NON_DETERMINISTIC, false});
    list.push_back(
        {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, CUDNN_STATUS_SUCCESS, CUDNN_DETERMINISTIC, false});
    list.push_back({CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT, CUDNN_STATUS_NOT_SUPPORTED,
                    CUDNN_DETERMINISTIC, false});
  }
  int n = 0;
  for (const Proposal& p : list) {
    if (n == requested) break;
    Perf r{};
    r.algo = Algo(p.algo);
    r.status = p.status;
    r.determinism = p.det;
    r.mathType = p.tensor_op ? CUDNN_TENSOR_OP_MATH : conv->math;
    if (p.status == CUDNN_STATUS_SUCCESS) workspace_bytes(pass, p.algo, x, w, y, elem, &r.memory);
    out[n++] = r;
  }
  *returned = n;
  return CUDNN_STATUS_SUCCESS;
}

}  // namespace emu

inline cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(
    cudnnHandle_t, const cudnnTensorDescriptor_t srcDesc, const cudnnFilterDescriptor_t filterDesc,
    const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t destDesc,
    const int requestedAlgoCount, int* returnedAlgoCount,
    cudnnConvolutionFwdAlgoPerf_t* perfResults) {
  return emu::propose<cudnnConvolutionFwdAlgoPerf_t, cudnnConvolutionFwdAlgo_t>(
      emu::kFwd, srcDesc, filterDesc, convDesc, destDesc, requestedAlgoCount, returnedAlgoCount,
      perfResults);
}
inline cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(
    cudnnHandle_t, const cudnnFilterDescriptor_t filterDesc, const cudnnTensorDescriptor_t diffDesc,
    const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t gradDesc,
    const int requestedAlgoCount, int* returnedAlgoCount,
    cudnnConvolutionBwdDataAlgoPerf_t* perfResults) {
  return emu::propose<cudnnConvolutionBwdDataAlgoPerf_t, cudnnConvolutionBwdDataAlgo_t>(
      emu::kBwdData, gradDesc, filterDesc, convDesc, diffDesc, requestedAlgoCount,
      returnedAlgoCount, perfResults);
}
inline cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(
    cudnnHandle_t, const cudnnTensorDescriptor_t srcDesc, const cudnnTensorDescriptor_t diffDesc,
    const cudnnConvolutionDescriptor_t convDesc, const cudnnFilterDescriptor_t gradDesc,
    const int requestedAlgoCount, int* returnedAlgoCount,
    cudnnConvolutionBwdFilterAlgoPerf_t* perfResults) {
  return emu::propose<cudnnConvolutionBwdFilterAlgoPerf_t, cudnnConvolutionBwdFilterAlgo_t>(
      emu::kBwdFilter, srcDesc, gradDesc, convDesc, diffDesc, requestedAlgoCount, returnedAlgoCount,
      perfResults);
}

inline cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(
    cudnnHandle_t, const cudnnTensorDescriptor_t xDesc, const cudnnFilterDescriptor_t wDesc,
    const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t yDesc,
    cudnnConvolutionFwdAlgo_t algo, size_t* sizeInBytes) {
  size_t elem = 0;
  cudnnStatus_t s = emu::check_conv(xDesc, wDesc, convDesc, yDesc, &elem);
  if (s != CUDNN_STATUS_SUCCESS) return s;
  return emu::workspace_bytes(emu::kFwd, algo, xDesc, wDesc, yDesc, elem, sizeInBytes);
}
inline cudnnStatus_t cudnnGetConvolutionBackwardDataWorkspaceSize(
    cudnnHandle_t, const cudnnFilterDescriptor_t wDesc, const cudnnTensorDescriptor_t dyDesc,
    const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t dxDesc,
    cudnnConvolutionBwdDataAlgo_t algo, size_t* sizeInBytes) {
  size_t elem = 0;
  cudnnStatus_t s = emu::check_conv(dxDesc, wDesc, convDesc, dyDesc, &elem);
  if (s != CUDNN_STATUS_SUCCESS) return s;
  return emu::workspace_bytes(emu::kBwdData, algo, dxDesc, wDesc, dyDesc, elem, sizeInBytes);
}
inline cudnnStatus_t cudnnGetConvolutionBackwardFilterWorkspaceSize(
    cudnnHandle_t, const cudnnTensorDescriptor_t xDesc, const cudnnTensorDescriptor_t dyDesc,
    const cudnnConvolutionDescriptor_t convDesc, const cudnnFilterDescriptor_t gradDesc,
    cudnnConvolutionBwdFilterAlgo_t algo, size_t* sizeInBytes) {
  size_t elem = 0;
  cudnnStatus_t s = emu::check_conv(xDesc, gradDesc, convDesc, dyDesc, &elem);
  if (s != CUDNN_STATUS_SUCCESS) return s;
  return emu::workspace_bytes(emu::kBwdFilter, algo, xDesc, gradDesc, dyDesc, elem, sizeInBytes);
}

inline cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t h, const void* alpha,
                                             const cudnnTensorDescriptor_t xDesc, const void* x,
                                             const cudnnFilterDescriptor_t wDesc, const void* w,
                                             const cudnnConvolutionDescriptor_t convDesc,
                                             cudnnConvolutionFwdAlgo_t algo, void* workSpace,
                                             size_t workSpaceSizeInBytes, const void* beta,
                                             const cudnnTensorDescriptor_t yDesc, void* y) {
  return emu::run_conv(h, emu::kFwd, algo, alpha, beta, xDesc, x, wDesc, w, convDesc, yDesc,
                       nullptr, y, workSpace, workSpaceSizeInBytes);
}
inline cudnnStatus_t cudnnConvolutionBackwardData(
    cudnnHandle_t h, const void* alpha, const cudnnFilterDescriptor_t wDesc, const void* w,
    const cudnnTensorDescriptor_t dyDesc, const void* dy,
    const cudnnConvolutionDescriptor_t convDesc, cudnnConvolutionBwdDataAlgo_t algo,
    void* workSpace, size_t workSpaceSizeInBytes, const void* beta,
    const cudnnTensorDescriptor_t dxDesc, void* dx) {
  return emu::run_conv(h, emu::kBwdData, algo, alpha, beta, dxDesc, nullptr, wDesc, w, convDesc,
                       dyDesc, dy, dx, workSpace, workSpaceSizeInBytes);
}
inline cudnnStatus_t cudnnConvolutionBackwardFilter(
    cudnnHandle_t h, const void* alpha, const cudnnTensorDescriptor_t xDesc, const void* x,
    const cudnnTensorDescriptor_t dyDesc, const void* dy,
    const cudnnConvolutionDescriptor_t convDesc, cudnnConvolutionBwdFilterAlgo_t algo,
    void* workSpace, size_t workSpaceSizeInBytes, const void* beta,
    const cudnnFilterDescriptor_t dwDesc, void* dw) {
  return emu::run_conv(h, emu::kBwdFilter, algo, alpha, beta, xDesc, x, dwDesc, nullptr, convDesc,
                       dyDesc, dy, dw, workSpace, workSpaceSizeInBytes);
}
