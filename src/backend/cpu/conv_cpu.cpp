// CPU convolution by im2col + GEMM. For a group of nb images the input patches are unrolled into
// col [K, nb·P] (K = C·kh·kw rows, one per weight element; P = OH·OW columns per image), so that
//   forward:          Y[O, nb·P]  = W[O, K] · col
//   weight gradient:  dW[O, K]   += dY[O, nb·P] · colᵀ          (col rebuilt from x)
//   input gradient:   dcol[K, nb·P] = Wᵀ · dY, then col2im adds each column back to its pixels.
// Images are split over the threads; each thread unrolls its own groups into its own buffer
// (sized to stay in its L2 cache) and calls a single-threaded GEMM (OpenBLAS runs on one thread
// inside an OpenMP parallel region), so the threads never wait for each other inside a step.
// Grouping several images makes the GEMM's column count large even for small feature maps
// (ResNet's 8x8 stage has P = 64). With fewer groups than threads, groups run one after the
// other and the GEMMs use all threads instead.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "backend/cpu/dispatch.h"
#include "backend/cpu/parallel.h"
#include "ops/kernels/conv.h"

namespace freight::cpu {
namespace {

// ---------------------------------------------------------------- GEMM wrappers (row-major)
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(m),
              int(n), int(k), alpha, a, int(lda), b, int(ldb), beta, c, int(ldc));
}
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a,
          int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(m),
              int(n), int(k), alpha, a, int(lda), b, int(ldb), beta, c, int(ldc));
}

// ---------------------------------------------------------------- geometry helpers
// For kernel column q, the output columns j whose input column j·sw − pw + q·dw lies inside
// [0, w): j0 <= j < j1 (all other columns read padding).
struct ColRange {
  int64_t j0, j1;
};
ColRange valid_cols(const Conv2dGeometry& g, int64_t q) {
  int64_t off = q * g.dw - g.pw;  // input column of output column 0
  // smallest j with j·sw + off >= 0, and one past the largest with j·sw + off <= w − 1
  int64_t j0 = off >= 0 ? 0 : (-off + g.sw - 1) / g.sw;
  int64_t j1 = off > g.w - 1 ? 0 : (g.w - 1 - off) / g.sw + 1;
  j0 = std::min(j0, g.ow);
  j1 = std::clamp(j1, j0, g.ow);
  return {j0, j1};
}

// Unrolls one image x [c, h, w] into col rows k = (ci, p, q), each holding P = oh·ow values at
// col + k·ldcol: col[k][i·ow + j] = x[ci][i·sh − ph + p·dh][j·sw − pw + q·dw] (0 outside).
template <class T>
void im2col(const T* x, const Conv2dGeometry& g, T* col, int64_t ldcol) {
  const int64_t P = g.oh * g.ow;
  for (int64_t q = 0; q < g.kw; ++q) {
    auto [j0, j1] = valid_cols(g, q);
    const int64_t off_w = q * g.dw - g.pw;
    for (int64_t ci = 0; ci < g.c; ++ci) {
      const T* xc = x + ci * g.h * g.w;
      for (int64_t p = 0; p < g.kh; ++p) {
        T* row = col + ((ci * g.kh + p) * g.kw + q) * ldcol;
        for (int64_t i = 0; i < g.oh; ++i) {
          T* out = row + i * g.ow;
          int64_t ih = i * g.sh - g.ph + p * g.dh;
          if (ih < 0 || ih >= g.h) {
            std::fill(out, out + g.ow, T(0));
            continue;
          }
          const T* src = xc + ih * g.w + off_w;  // src[j·sw] is the input of output column j
          for (int64_t j = 0; j < j0; ++j) out[j] = T(0);
          if (g.sw == 1) {
#pragma omp simd
            for (int64_t j = j0; j < j1; ++j) out[j] = src[j];
          } else {
            const int64_t s = g.sw;
            for (int64_t j = j0; j < j1; ++j) out[j] = src[j * s];
          }
          for (int64_t j = j1; j < g.ow; ++j) out[j] = T(0);
        }
      }
    }
  }
  (void)P;
}

// The adjoint of im2col: dx [c, h, w] = Σ over the col entries that read each pixel. dx is
// overwritten.
template <class T>
void col2im(const T* col, int64_t ldcol, const Conv2dGeometry& g, T* dx) {
  std::fill(dx, dx + g.c * g.h * g.w, T(0));
  for (int64_t q = 0; q < g.kw; ++q) {
    auto [j0, j1] = valid_cols(g, q);
    const int64_t off_w = q * g.dw - g.pw;
    for (int64_t ci = 0; ci < g.c; ++ci) {
      T* dxc = dx + ci * g.h * g.w;
      for (int64_t p = 0; p < g.kh; ++p) {
        const T* row = col + ((ci * g.kh + p) * g.kw + q) * ldcol;
        for (int64_t i = 0; i < g.oh; ++i) {
          int64_t ih = i * g.sh - g.ph + p * g.dh;
          if (ih < 0 || ih >= g.h) continue;
          const T* in = row + i * g.ow;
          T* dst = dxc + ih * g.w + off_w;
          if (g.sw == 1) {
#pragma omp simd
            for (int64_t j = j0; j < j1; ++j) dst[j] += in[j];
          } else {
            const int64_t s = g.sw;
            for (int64_t j = j0; j < j1; ++j) dst[j * s] += in[j];
          }
        }
      }
    }
  }
}

// A 1x1 convolution with stride 1 and no padding reads each pixel once: col is the image itself.
bool is_pointwise(const Conv2dGeometry& g) {
  return g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && g.ph == 0 && g.pw == 0;
}

// ---------------------------------------------------------------- work split
// Bytes of col one thread keeps: about half of a 2 MiB L2, so the GEMM's packing reads it
// from cache right after im2col wrote it.
constexpr int64_t kColBudgetBytes = int64_t(1) << 20;
// Columns that make a GEMM efficient (OpenBLAS packs B in panels of a few hundred columns).
constexpr int64_t kTargetCols = 1024;

struct Plan {
  int64_t nb;      // images per group
  int64_t groups;  // ceil(n / nb)
  bool parallel;   // groups spread over threads (single-threaded GEMMs) or run in turn
  int threads;     // threads that run groups (1 when !parallel)
};

Plan make_plan(const Conv2dGeometry& g, size_t elem) {
  const int64_t K = g.c * g.kh * g.kw, P = g.oh * g.ow;
  Plan pl;
  // A pointwise convolution's GEMM reads the image in place: one image per group.
  int64_t by_cols = is_pointwise(g) ? 1 : std::max<int64_t>(1, (kTargetCols + P - 1) / P);
  int64_t by_bytes =
      std::max<int64_t>(1, kColBudgetBytes / std::max<int64_t>(1, K * P * int64_t(elem)));
  pl.nb = std::min({by_cols, by_bytes, g.n});
  int max_threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  // Keep at least one group per thread when the batch allows it.
  if (max_threads > 1 && g.n >= max_threads)
    pl.nb = std::min(pl.nb, std::max<int64_t>(1, g.n / max_threads));
  pl.groups = (g.n + pl.nb - 1) / pl.nb;
  pl.parallel = max_threads > 1 && pl.groups >= max_threads;
  pl.threads = pl.parallel ? max_threads : 1;
  return pl;
}

// Runs fn(group, thread) for every group: spread over the threads (static, contiguous ranges)
// when the plan says so, else in turn on this thread.
template <class Fn>
void run_groups(const Plan& pl, Fn&& fn) {
  if (!pl.parallel) {
    for (int64_t gi = 0; gi < pl.groups; ++gi) fn(gi, 0);
    return;
  }
#pragma omp parallel num_threads(pl.threads)
  {
    int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    int64_t b = pl.groups * t / nt, e = pl.groups * (t + 1) / nt;
    for (int64_t gi = b; gi < e; ++gi) fn(gi, int(t));
  }
}

template <class T>
T* ptr(const Tensor& t) {
  return static_cast<T*>(t.data_ptr());
}

// ---------------------------------------------------------------- forward
template <class T>
void forward_typed(const Tensor& xt, const Tensor& wt, const Tensor& bt, const Conv2dGeometry& g,
                   Tensor& yt) {
  const int64_t K = g.c * g.kh * g.kw, P = g.oh * g.ow, O = g.o;
  const T* x = ptr<T>(xt);
  const T* w = ptr<T>(wt);
  const T* bias = bt.defined() ? ptr<T>(bt) : nullptr;
  T* y = ptr<T>(yt);
  const int64_t x_img = g.c * g.h * g.w, y_img = O * P;
  if (K == 0) {  // no input channels: the output is the bias
    for (int64_t i = 0; i < g.n * O; ++i)
      std::fill(y + i * P, y + (i + 1) * P, bias ? bias[i % O] : T(0));
    return;
  }
  const bool pointwise = is_pointwise(g);
  Plan pl = make_plan(g, sizeof(T));
  // Per thread: col [K, nb·P] and the GEMM result [O, nb·P] when nb > 1.
  const int64_t col_sz = pointwise ? 0 : K * pl.nb * P;
  const int64_t tmp_sz = pl.nb > 1 ? O * pl.nb * P : 0;
  Tensor ws = Tensor::empty({std::max<int64_t>(1, pl.threads * (col_sz + tmp_sz))}, xt.dtype());
  T* wsp = ptr<T>(ws);

  run_groups(pl, [&](int64_t gi, int t) {
    const int64_t i0 = gi * pl.nb, nb = std::min(pl.nb, g.n - i0), cols = nb * P;
    T* col = wsp + t * (col_sz + tmp_sz);
    T* tmp = col + col_sz;
    const T* b_mat;
    if (pointwise) {
      b_mat = x + i0 * x_img;
    } else {
      for (int64_t b = 0; b < nb; ++b) im2col(x + (i0 + b) * x_img, g, col + b * P, cols);
      b_mat = col;
    }
    if (nb == 1) {  // straight into y[i0]
      T* yi = y + i0 * y_img;
      gemm(false, false, O, P, K, T(1), w, K, b_mat, P, T(0), yi, P);
      if (bias)
        for (int64_t o = 0; o < O; ++o) {
          T bo = bias[o];
          T* r = yi + o * P;
#pragma omp simd
          for (int64_t j = 0; j < P; ++j) r[j] += bo;
        }
      return;
    }
    gemm(false, false, O, cols, K, T(1), w, K, b_mat, cols, T(0), tmp, cols);
    // tmp[o][b·P + j] -> y[i0 + b][o][j], plus the bias
    for (int64_t b = 0; b < nb; ++b)
      for (int64_t o = 0; o < O; ++o) {
        const T* src = tmp + o * cols + b * P;
        T* dst = y + (i0 + b) * y_img + o * P;
        T bo = bias ? bias[o] : T(0);
#pragma omp simd
        for (int64_t j = 0; j < P; ++j) dst[j] = src[j] + bo;
      }
  });
}

// ---------------------------------------------------------------- input gradient
template <class T>
void backward_input_typed(const Tensor& gyt, const Tensor& wt, const Conv2dGeometry& g,
                          Tensor& gxt) {
  const int64_t K = g.c * g.kh * g.kw, P = g.oh * g.ow, O = g.o;
  const T* gy = ptr<T>(gyt);
  const T* w = ptr<T>(wt);
  T* gx = ptr<T>(gxt);
  const int64_t x_img = g.c * g.h * g.w, y_img = O * P;
  if (K == 0) return;
  const bool pointwise = is_pointwise(g);
  Plan pl = make_plan(g, sizeof(T));
  const int64_t col_sz = pointwise ? 0 : K * pl.nb * P;
  const int64_t tmp_sz = pl.nb > 1 ? O * pl.nb * P : 0;
  Tensor ws = Tensor::empty({std::max<int64_t>(1, pl.threads * (col_sz + tmp_sz))}, gyt.dtype());
  T* wsp = ptr<T>(ws);

  run_groups(pl, [&](int64_t gi, int t) {
    const int64_t i0 = gi * pl.nb, nb = std::min(pl.nb, g.n - i0), cols = nb * P;
    T* col = wsp + t * (col_sz + tmp_sz);
    T* tmp = col + col_sz;
    if (pointwise) {  // gx[i] = Wᵀ · gy[i]
      gemm(true, false, K, P, O, T(1), w, K, gy + i0 * y_img, P, T(0), gx + i0 * x_img, P);
      return;
    }
    const T* a;
    if (nb == 1) {
      a = gy + i0 * y_img;
    } else {  // gather gy[i0 + b][o][:] into tmp[o][b·P:]
      for (int64_t b = 0; b < nb; ++b)
        for (int64_t o = 0; o < O; ++o)
          std::memcpy(tmp + o * cols + b * P, gy + (i0 + b) * y_img + o * P, size_t(P) * sizeof(T));
      a = tmp;
    }
    gemm(true, false, K, cols, O, T(1), w, K, a, cols, T(0), col, cols);
    for (int64_t b = 0; b < nb; ++b) col2im(col + b * P, cols, g, gx + (i0 + b) * x_img);
  });
}

// ---------------------------------------------------------------- weight and bias gradients
template <class T>
void backward_weight_typed(const Tensor& gyt, const Tensor& xt, const Conv2dGeometry& g,
                           Tensor& gwt, Tensor& gbt) {
  const int64_t K = g.c * g.kh * g.kw, P = g.oh * g.ow, O = g.o;
  const T* gy = ptr<T>(gyt);
  const bool want_w = gwt.defined() && K > 0, want_b = gbt.defined();
  const int64_t x_img = g.c * g.h * g.w, y_img = O * P;
  const bool pointwise = is_pointwise(g);
  Plan pl = make_plan(g, sizeof(T));
  const int64_t col_sz = want_w && !pointwise ? K * pl.nb * P : 0;
  const int64_t tmp_sz = want_w && pl.nb > 1 ? O * pl.nb * P : 0;
  // Per thread: its partial dW [O, K] and db [O], then the buffers.
  const int64_t acc_sz = O * K + O;
  const int64_t per_thread = acc_sz + col_sz + tmp_sz;
  Tensor ws = Tensor::empty({std::max<int64_t>(1, pl.threads * per_thread)}, gyt.dtype());
  T* wsp = ptr<T>(ws);
  for (int t = 0; t < pl.threads; ++t)  // zero the partial sums
    std::fill(wsp + t * per_thread, wsp + t * per_thread + acc_sz, T(0));
  const T* x = want_w ? ptr<T>(xt) : nullptr;

  run_groups(pl, [&](int64_t gi, int t) {
    const int64_t i0 = gi * pl.nb, nb = std::min(pl.nb, g.n - i0), cols = nb * P;
    T* dw = wsp + t * per_thread;
    T* db = dw + O * K;
    T* col = db + O;
    T* tmp = col + col_sz;
    if (want_b)
      for (int64_t b = 0; b < nb; ++b)
        for (int64_t o = 0; o < O; ++o) {
          const T* r = gy + (i0 + b) * y_img + o * P;
          T s = 0;
#pragma omp simd reduction(+ : s)
          for (int64_t j = 0; j < P; ++j) s += r[j];
          db[o] += s;
        }
    if (!want_w) return;
    if (pointwise) {  // dW += gy[i] · x[i]ᵀ
      gemm(false, true, O, K, P, T(1), gy + i0 * y_img, P, x + i0 * x_img, P, T(1), dw, K);
      return;
    }
    for (int64_t b = 0; b < nb; ++b) im2col(x + (i0 + b) * x_img, g, col + b * P, cols);
    const T* a;
    if (nb == 1) {
      a = gy + i0 * y_img;
    } else {
      for (int64_t b = 0; b < nb; ++b)
        for (int64_t o = 0; o < O; ++o)
          std::memcpy(tmp + o * cols + b * P, gy + (i0 + b) * y_img + o * P, size_t(P) * sizeof(T));
      a = tmp;
    }
    gemm(false, true, O, K, cols, T(1), a, cols, col, cols, T(1), dw, K);
  });

  // Sum the threads' partials.
  if (want_w) {
    T* out = ptr<T>(gwt);
    for (int64_t i = 0; i < O * K; ++i) {
      T s = 0;
      for (int t = 0; t < pl.threads; ++t) s += wsp[t * per_thread + i];
      out[i] = s;
    }
  } else if (gwt.defined()) {
    std::fill(ptr<T>(gwt), ptr<T>(gwt) + gwt.numel(), T(0));
  }
  if (want_b) {
    T* out = ptr<T>(gbt);
    for (int64_t o = 0; o < O; ++o) {
      T s = 0;
      for (int t = 0; t < pl.threads; ++t) s += wsp[t * per_thread + O * K + o];
      out[o] = s;
    }
  }
}

void forward_cpu(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dGeometry& g,
                 Tensor& y) {
  dispatch_floating(x.dtype(), "conv2d_forward",
                    [&](auto tag) { forward_typed<decltype(tag)>(x, w, b, g, y); });
}
void backward_input_cpu(const Tensor& gy, const Tensor& w, const Conv2dGeometry& g, Tensor& gx) {
  dispatch_floating(gy.dtype(), "conv2d_backward_input",
                    [&](auto tag) { backward_input_typed<decltype(tag)>(gy, w, g, gx); });
}
void backward_weight_cpu(const Tensor& gy, const Tensor& x, const Conv2dGeometry& g, Tensor& gw,
                         Tensor& gb) {
  dispatch_floating(gy.dtype(), "conv2d_backward_weight",
                    [&](auto tag) { backward_weight_typed<decltype(tag)>(gy, x, g, gw, gb); });
}

}  // namespace

FREIGHT_REGISTER_KERNEL(kernels::conv2d_forward, CPU, forward_cpu);
FREIGHT_REGISTER_KERNEL(kernels::conv2d_backward_input, CPU, backward_input_cpu);
FREIGHT_REGISTER_KERNEL(kernels::conv2d_backward_weight, CPU, backward_weight_cpu);

}  // namespace freight::cpu
