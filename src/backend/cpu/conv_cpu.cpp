// CPU convolution (NCHW, no groups). All three passes are GEMMs over the weight taps
// k = (c, p, q), K = C·kh·kw of them, and the output pixels of the batch:
//   forward:          Y[O, pixels]     = W[O, K] · B[K, pixels] + b
//   weight gradient:  dW[O, K]         = Σ_pixels dY[O, pixels] · B[K, pixels],   db = Σ dY
//   input gradient:   dB[K, pixels]    = Wᵀ · dY, each entry added back to the input pixel
//                                        it was read from ("col2im"),
// where B[k, pixel] is the input value that tap k reads for that pixel (0 in the padding).
//
// Engines (chosen per pass by `pick`; tests can force one through set_conv_engine):
//  * Implicit (register tiles, stride 1, conv_tile_engines.h): B is never built. In a zero-padded
//    copy of the image, numbered by "virtual" pixels that run over the padded width, B's row k is
//    the plane itself shifted by tap k's offset, so a register tile (8 output channels x 48
//    pixels on AVX-512, 4 x 24 on AVX2; conv_tiles.h) reads shifted windows and stores straight
//    into NCHW. The input gradient of a
//    stride-1 convolution is a stride-1 convolution of dY with the flipped weights, so it runs
//    on the same code; the weight gradient broadcasts taps against vectors of output channels
//    of a transposed dY.
//  * Panel (register tiles, any stride): B is unrolled (im2col) chunk by chunk straight into the
//    tile's panel layout; the input gradient goes through col2im.
//  * Dnnl (fp32, where oneDNN was found; conv_dnnl.h): oneDNN's channel-blocked kernels with
//    reorders from and to NCHW, on the passes where `dnnl_preferred` says it measured faster;
//    tried before `pick`, whose engine runs when oneDNN refuses a geometry.
//  * Blas (portable): the same chunks as plain rows through cblas_sgemm/dgemm. OpenBLAS spends
//    most of its time packing and on edges at these shapes (M = O of 6 to 64, K = 9 to 576):
//    60-120 GF/s on two AVX-512 cores where the tiles reach 200-290.
// Threads take whole images (or pixel ranges), each with its own buffers sized for its L2, and
// call single-threaded kernels (OpenBLAS runs on one thread inside a parallel region), so they
// never wait for each other inside a pass.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "backend/cpu/conv_cpu.h"
#include "backend/cpu/conv_dnnl.h"
#include "backend/cpu/conv_patches.h"
#include "backend/cpu/conv_tile_engines.h"
#include "backend/cpu/conv_winograd.h"
#include "backend/cpu/dispatch.h"
#include "backend/cpu/parallel.h"
#include "ops/kernels/conv.h"

namespace freight::cpu {
namespace {
using namespace conv_detail;

// ================================================================ BLAS engine
void blas_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
               int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(m),
              int(n), int(k), alpha, a, int(lda), b, int(ldb), beta, c, int(ldc));
}
void blas_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a,
               int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(m),
              int(n), int(k), alpha, a, int(lda), b, int(ldb), beta, c, int(ldc));
}

// Chunk by chunk: col [K, L] and (backward) dY [O, L] as plain rows; one GEMM per chunk. Inside
// a parallel region OpenBLAS runs single-threaded, which is what each thread wants here.
//
// OpenBLAS's result for a column of C depends on the product's width and the column's place in
// it (its kernels handle a remainder of columns differently; seen with the Zen kernels), so the
// forward and the input gradient run the same GEMMs whatever the thread count: fixed chunks of
// `group` whole images, or of one image's pixels where an image alone exceeds the budget, and
// threads take whole chunks (the input gradient's whole images: col2im of one image from two
// threads would race). The group is sized for the pool's thread count, not the pass's (which
// follows the work, threads_for), so a pass gives the same bits split or on one thread.
struct FixedChunks {
  int64_t P, group, width;  // pixels per image, images per chunk, pixels per chunk at most
  int64_t per_image;        // chunks per image (1 when chunks hold whole images)
  int64_t count(int64_t n) const { return per_image > 1 ? n * per_image : (n + group - 1) / group; }
  // Chunk i as [c0, c1) of the batch's n·P pixels.
  std::pair<int64_t, int64_t> chunk(int64_t i, int64_t n) const {
    if (per_image > 1) {
      const int64_t c0 = i / per_image * P + i % per_image * width;
      return {c0, std::min(c0 + width, (i / per_image + 1) * P)};
    }
    return {i * group * P, std::min(n, (i + 1) * group) * P};
  }
};
inline FixedChunks fixed_chunks(const Conv2dGeometry& g, int64_t rows, size_t elem) {
  const int64_t P = g.oh * g.ow;
  const int64_t L = chunk_pixels(rows, elem, 1, g.n * P);
  if (P > L) return {P, 1, L, (P + L - 1) / L};  // chunks of one image's pixels
  const int64_t pool = omp_in_parallel() ? 1 : std::max(1, omp_get_max_threads());
  const int64_t group = std::clamp<int64_t>(L / P, 1, (g.n + pool - 1) / pool);
  return {P, group, group * P, 1};
}
// Units the threads may take: chunks, or with `whole_images` the images (or groups of them).
inline int64_t fixed_units(const FixedChunks& f, int64_t n, bool whole_images) {
  return whole_images ? (n + f.group - 1) / f.group : f.count(n);
}
// fn(thread, c0, c1) for each chunk [c0, c1) of the batch's n·P pixels, on `nt` threads, each
// taking a run of units (fixed_units).
template <class Fn>
void for_fixed_chunks(int nt, int64_t n, const FixedChunks& f, bool whole_images, Fn&& fn) {
  const int64_t per_unit = whole_images ? f.per_image : 1;
  split_threads(nt, fixed_units(f, n, whole_images), 1, [&](int t, int64_t b, int64_t e) {
    for (int64_t i = b * per_unit; i < std::min(e * per_unit, f.count(n)); ++i) {
      const auto [c0, c1] = f.chunk(i, n);
      fn(t, c0, c1);
    }
  });
}

// The threads and the per-thread buffer of a pass on the BLAS engine: the kernels and
// conv2d_workspace_bytes read the same numbers.
struct BlasWork {
  FixedChunks f{};  // forward and input gradient
  int64_t L = 0;    // pixels per chunk
  int nt = 1;
  int64_t per_thread = 0;  // elements
};
inline BlasWork blas_work(const Conv2dGeometry& g, int pass, size_t elem) {
  const int64_t K = g.c * g.kh * g.kw, P = g.oh * g.ow, O = g.o, NP = g.n * P;
  const double macs = double(NP) * double(K * O);
  BlasWork w;
  if (pass < 2) {
    w.f = fixed_chunks(g, K + O, elem);
    w.L = w.f.width;
    w.nt = threads_for(macs, fixed_units(w.f, g.n, /*whole_images=*/pass == 1));
    w.per_thread = (K + O) * w.L;
  } else {
    w.nt = threads_for(macs, (NP + 15) / 16);
    w.L = chunk_pixels(K + O, elem, 16, (NP + w.nt - 1) / w.nt);
    w.per_thread = (K + O) * w.L + O * K + O;  // the chunk, then partial dW [O, K] and db [O]
  }
  return w;
}

template <class T>
struct BlasEngine {
  static void forward(const T* x, const T* w, const T* bias, const Conv2dGeometry& g, T* y,
                      bool relu) {
    const int64_t K = g.c * g.kh * g.kw, P = g.oh * g.ow, O = g.o;
    const BlasWork bw = blas_work(g, 0, sizeof(T));
    const int64_t L = bw.L;
    Tensor ws = Tensor::empty({bw.nt * bw.per_thread}, dtype_of<T>());
    for_fixed_chunks(bw.nt, g.n, bw.f, false, [&](int t, int64_t c0, int64_t c1) {
      T* col = ptr<T>(ws) + t * bw.per_thread;
      T* out = col + K * L;
      const int64_t n = c1 - c0;
      for (int64_t k = 0; k < K; ++k) patch_row(x, g, k, c0, c1, col + k * n);
      blas_gemm(false, false, O, n, K, T(1), w, K, col, n, T(0), out, n);
      for_image_pieces(c0, c1, P, [&](int64_t img, int64_t p0, int64_t p1, int64_t pos) {
        for (int64_t o = 0; o < O; ++o) {
          const T* src = out + o * n + pos;
          T* dst = y + (img * O + o) * P + p0;
          const T bo = bias ? bias[o] : T(0);
          for (int64_t j = 0; j < p1 - p0; ++j) dst[j] = src[j] + bo;
          if (relu) relu_in_place(dst, p1 - p0);
        }
      });
    });
  }

  static void backward_input(const T* gy, const T* w, const Conv2dGeometry& g, T* dx) {
    const int64_t K = g.c * g.kh * g.kw, P = g.oh * g.ow, O = g.o;
    const BlasWork bw = blas_work(g, 1, sizeof(T));
    const int64_t L = bw.L, image = g.c * g.h * g.w;
    Tensor ws = Tensor::empty({bw.nt * bw.per_thread}, dtype_of<T>());
    for_fixed_chunks(bw.nt, g.n, bw.f, true, [&](int t, int64_t c0, int64_t c1) {
      T* dcol = ptr<T>(ws) + t * bw.per_thread;
      T* dyc = dcol + K * L;
      const int64_t n = c1 - c0;
      // Zero the images that start in this chunk (each chunk's thread owns its whole images).
      std::fill(dx + (c0 + P - 1) / P * image, dx + (c1 + P - 1) / P * image, T(0));
      for (int64_t o = 0; o < O; ++o) grad_row(gy, g, o, c0, c1, dyc + o * n);
      blas_gemm(true, false, K, n, O, T(1), w, K, dyc, n, T(0), dcol, n);
      for (int64_t k = 0; k < K; ++k) scatter_row(dcol + k * n, g, k, c0, c1, dx);
    });
  }

  static void backward_weight(const T* gy, const T* x, const Conv2dGeometry& g, T* dw, T* db) {
    const int64_t K = g.c * g.kh * g.kw, P = g.oh * g.ow, O = g.o, NP = g.n * P;
    const BlasWork bw = blas_work(g, 2, sizeof(T));
    const int nt = bw.nt;
    const int64_t L = bw.L, per_thread = bw.per_thread;
    Tensor ws = Tensor::empty({nt * per_thread}, dtype_of<T>());
    split_threads(nt, NP, 16, [&](int t, int64_t b, int64_t e) {
      T* col = ptr<T>(ws) + t * per_thread;
      T* dyc = col + K * L;
      T* pw = dyc + O * L;  // this thread's partial dW [O, K] and db [O]
      T* pb = pw + O * K;
      std::fill(pw, pw + O * K + O, T(0));
      for (int64_t c0 = b; c0 < e; c0 += L) {
        const int64_t c1 = std::min(e, c0 + L), n = c1 - c0;
        for (int64_t o = 0; o < O; ++o) {
          grad_row(gy, g, o, c0, c1, dyc + o * n);
          T s = 0;
          for (int64_t j = 0; j < n; ++j) s += dyc[o * n + j];
          pb[o] += s;
        }
        if (!dw) continue;
        for (int64_t k = 0; k < K; ++k) patch_row(x, g, k, c0, c1, col + k * n);
        blas_gemm(false, true, O, K, n, T(1), dyc, n, col, n, T(1), pw, K);
      }
    });
    reduce_partials(ws, per_thread, (K + O) * L, nt, O, K, dw, db);
  }

  // Sums the threads' partial dW [O, K] and db [O] (at `offset` in each thread's block).
  static void reduce_partials(const Tensor& ws, int64_t per_thread, int64_t offset, int nt,
                              int64_t O, int64_t K, T* dw, T* db) {
    const T* base = ptr<T>(ws) + offset;
    for (int64_t i = 0; i < O * K + O; ++i) {
      T s = 0;
      for (int t = 0; t < nt; ++t) s += base[t * per_thread + i];
      if (i < O * K) {
        if (dw) dw[i] = s;
      } else if (db) {
        db[i - O * K] = s;
      }
    }
  }
};

// ================================================================ engine choice

bool winograd_f2_preferred(const Conv2dGeometry& g, int pass);

// The engine for one pass (0 forward, 1 input gradient, 2 weight gradient).
//  * Every pass of a 3x3 stride-1 convolution: WinogradF2 where winograd_f2_preferred says it
//    measured faster (before oneDNN is asked).
//  * Forward: with stride 1, Implicit, or Direct when it wastes clearly less (Implicit computes
//    the padding columns and each image's last-tile overrun; Direct needs two vectors of output
//    channels and enough taps to hide the transposition of its output); with other strides
//    Direct when O fills a vector, else Panel.
//  * Input gradient: for stride 1 (and padding <= the dilated kernel extent − 1, true of every
//    usual convolution) a forward convolution of dY, by the forward's rule for its geometry;
//    else Panel with col2im.
//  * Weight gradient: Direct when O fills a vector (horizontal stride 1 or 2), else Implicit
//    (stride 1) or Panel.
// A forced engine is used where it applies, else Panel; without the tiles (the built-in baseline
// kernels) everything is Blas.
ConvEngine pick(const Conv2dGeometry& g, int pass) {
#if defined(FREIGHT_CONV_TILES)
  ConvEngine forced = forced_conv_engine();
  if (forced == ConvEngine::Dnnl || forced == ConvEngine::Winograd)
    forced = ConvEngine::Auto;  // a pass oneDNN does not run
  if (WinogradEngine<float>::applies(g) && (pass != 1 || input_grad_is_conv(g)) &&
      (forced == ConvEngine::WinogradF2 ||
       (forced == ConvEngine::Auto && winograd_f2_preferred(g, pass))))
    return ConvEngine::WinogradF2;
  if (forced == ConvEngine::WinogradF2) forced = ConvEngine::Auto;  // a convolution it cannot run
  const bool stride1 = g.sh == 1 && g.sw == 1;
  if (forced == ConvEngine::Blas || forced == ConvEngine::Panel) return forced;
  if (pass == 2) {
    // Direct sums over the real pixels only and measured at least as fast wherever it applies.
    const bool direct_ok = DirectEngine<float>::weight_grad_applies(g);
    if (forced == ConvEngine::Implicit) return stride1 ? forced : ConvEngine::Panel;
    if (direct_ok) return ConvEngine::Direct;
    return stride1 && forced == ConvEngine::Auto ? ConvEngine::Implicit : ConvEngine::Panel;
  }
  if (pass == 1 && !input_grad_is_conv(g)) return ConvEngine::Panel;
  const Conv2dGeometry f = pass == 1 ? input_grad_geometry(g) : g;  // the forward that runs
  const bool implicit_ok = f.sh == 1 && f.sw == 1, direct_ok = DirectEngine<float>::applies(f);
  if (forced == ConvEngine::Implicit) return implicit_ok ? forced : ConvEngine::Panel;
  if (forced == ConvEngine::Direct) return direct_ok ? forced : ConvEngine::Panel;
  // Direct's tiles need two channel vectors to run near the implicit tile's speed, and enough
  // taps to hide the transposition of its output.
  const int64_t K = f.c * f.kh * f.kw;
  const bool direct_fast = direct_ok && K >= 16 && f.o >= 2 * Simd<float>::kLanes;
  const double direct = direct_fast ? DirectEngine<float>::efficiency(f) : 0.0;
  if (implicit_ok)
    return direct > 1.05 * ImplicitEngine<float>::efficiency(f) ? ConvEngine::Direct
                                                                : ConvEngine::Implicit;
  return direct_ok && f.o >= Simd<float>::kLanes ? ConvEngine::Direct : ConvEngine::Panel;
#else
  (void)g, (void)pass;
  return ConvEngine::Blas;
#endif
}

// Counted in libfreight (conv_engine_choice.cpp), for tests that check a forced engine really ran.
void ran(int pass, ConvEngine e) {
  count_conv_engine_run(pass, e);
}

// Whether oneDNN runs an fp32 pass on engine e (Winograd or Dnnl): when forced, or where Auto
// prefers it (winograd_preferred, dnnl_preferred). When oneDNN then refuses the geometry, the
// next is tried: Winograd, then Dnnl, then `pick`'s engine.
bool dnnl_preferred(const Conv2dGeometry& g, int pass);
bool winograd_preferred(const Conv2dGeometry& g, int pass);
bool use_dnnl(const Conv2dGeometry& g, int pass, ConvEngine e) {
  const ConvEngine forced = forced_conv_engine();
  if (forced == e) return true;  // set_conv_engine checked it is built
  if (forced != ConvEngine::Auto || !conv_dnnl_allowed()) return false;
  if (pick(g, pass) == ConvEngine::WinogradF2) return false;  // measured faster than oneDNN's
  return e == ConvEngine::Winograd ? winograd_preferred(g, pass) : dnnl_preferred(g, pass);
}
// oneDNN's team for the pass: as many threads as the work pays for (threads_for).
int dnnl_threads(const Conv2dGeometry& g) {
  const double macs = double(g.n * g.oh * g.ow) * double(g.c * g.kh * g.kw) * double(g.o);
  return threads_for(macs, g.n * g.o);
}
constexpr ConvEngine kDnnlEngines[] = {ConvEngine::Winograd, ConvEngine::Dnnl};
DnnlAlgorithm algorithm_of(ConvEngine e) {
  return e == ConvEngine::Winograd ? DnnlAlgorithm::Winograd : DnnlAlgorithm::Direct;
}
// Runs an fp32 pass on the first of oneDNN's engines that is wanted and takes the geometry:
// `call(threads, algorithm)` runs it and says whether oneDNN took it. False when none did.
template <class Call>
bool ran_on_dnnl(const Conv2dGeometry& g, int pass, Call call) {
  for (ConvEngine e : kDnnlEngines)
    if (use_dnnl(g, pass, e) && call(dnnl_threads(g), algorithm_of(e))) {
      ran(pass, e);
      return true;
    }
  return false;
}

// No default cases: -Wswitch flags an engine left out.
template <class T>
struct Engine {
  // With `relu` every engine but oneDNN's applies it to outputs it has just written (a tile's
  // vectors, an image, a chunk); after oneDNN's reorder back to NCHW it is a pass of its own.
  static void forward(const T* x, const T* w, const T* b, const Conv2dGeometry& g, T* y,
                      bool relu) {
    if constexpr (std::is_same_v<T, float>)
      if (ran_on_dnnl(g, 0, [&](int threads, DnnlAlgorithm a) {
            return dnnl_conv_forward(x, w, b, g, y, threads, a);
          })) {
        if (relu)
          parallel_for(g.n * g.o * g.oh * g.ow, elementwise_grain(),
                       [&](int64_t lo, int64_t hi) { relu_in_place(y + lo, hi - lo); });
        return;
      }
    const ConvEngine e = pick(g, 0);
    switch (e) {
#if defined(FREIGHT_CONV_TILES)
      case ConvEngine::Implicit:
        ImplicitEngine<T>::forward(x, w, b, g, y, relu);
        break;
      case ConvEngine::Direct:
        DirectEngine<T>::forward(x, w, b, g, y, relu);
        break;
      case ConvEngine::Panel:
        PanelEngine<T>::forward(x, w, b, g, y, relu);
        break;
      case ConvEngine::WinogradF2:
        WinogradEngine<T>::forward(x, w, b, g, y, relu);
        break;
#else
      case ConvEngine::Implicit:
      case ConvEngine::Direct:
      case ConvEngine::Panel:
      case ConvEngine::WinogradF2:
#endif
      case ConvEngine::Auto:
      case ConvEngine::Dnnl:
      case ConvEngine::Winograd:
      case ConvEngine::Blas:
        BlasEngine<T>::forward(x, w, b, g, y, relu);
        break;
    }
    ran(0, e);
  }
  static void backward_input(const T* gy, const T* w, const Conv2dGeometry& g, T* dx) {
    if constexpr (std::is_same_v<T, float>)
      if (ran_on_dnnl(g, 1, [&](int threads, DnnlAlgorithm a) {
            return dnnl_conv_backward_input(gy, w, g, dx, threads, a);
          }))
        return;
    const ConvEngine e = pick(g, 1);
    switch (e) {
#if defined(FREIGHT_CONV_TILES)
      case ConvEngine::Implicit:
        ImplicitEngine<T>::backward_input(gy, w, g, dx);
        break;
      case ConvEngine::Direct:
        DirectEngine<T>::backward_input(gy, w, g, dx);
        break;
      case ConvEngine::Panel:
        PanelEngine<T>::backward_input(gy, w, g, dx);
        break;
      case ConvEngine::WinogradF2:
        WinogradEngine<T>::backward_input(gy, w, g, dx);
        break;
#else
      case ConvEngine::Implicit:
      case ConvEngine::Direct:
      case ConvEngine::Panel:
      case ConvEngine::WinogradF2:
#endif
      case ConvEngine::Auto:
      case ConvEngine::Dnnl:
      case ConvEngine::Winograd:
      case ConvEngine::Blas:
        BlasEngine<T>::backward_input(gy, w, g, dx);
        break;
    }
    ran(1, e);
  }
  // With `relu_out` (a fused ReLU's output) the direct and Winograd engines mask each image's dY
  // as they read it; the others read a masked copy made in a pass of its own first.
  static void backward_weight(const T* gy, const T* x, const Conv2dGeometry& g, T* dw, T* db,
                              const T* relu_out) {
    Tensor copy;
    auto masked = [&]() -> const T* {
      if (!relu_out) return gy;
      if (copy.defined()) return ptr<T>(copy);  // made for an engine that then refused the pass
      const int64_t n = g.n * g.o * g.oh * g.ow;
      copy = Tensor::empty({n}, dtype_of<T>());
      T* m = ptr<T>(copy);
      parallel_for(n, elementwise_grain(), [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) m[i] = relu_passes(relu_out[i]) ? gy[i] : T(0);
      });
      return m;
    };
    if constexpr (std::is_same_v<T, float>)
      if (dw && ran_on_dnnl(g, 2, [&](int threads, DnnlAlgorithm a) {
            return dnnl_conv_backward_weight(masked(), x, g, dw, db, threads, a);
          }))
        return;
    const ConvEngine e = pick(g, 2);
    switch (e) {
#if defined(FREIGHT_CONV_TILES)
      case ConvEngine::Implicit:
        ImplicitEngine<T>::backward_weight(masked(), x, g, dw, db);
        break;
      case ConvEngine::Direct:
        DirectEngine<T>::backward_weight(gy, x, g, dw, db, relu_out);
        break;
      case ConvEngine::Panel:
        PanelEngine<T>::backward_weight(masked(), x, g, dw, db);
        break;
      case ConvEngine::WinogradF2:
        if (dw)
          WinogradEngine<T>::backward_weight(gy, x, g, dw, db, relu_out);
        else  // db alone: the sums of the masked copy
          WinogradEngine<T>::backward_weight(masked(), x, g, dw, db);
        break;
#else
      case ConvEngine::Implicit:
      case ConvEngine::Direct:
      case ConvEngine::Panel:
      case ConvEngine::WinogradF2:
#endif
      case ConvEngine::Auto:
      case ConvEngine::Dnnl:
      case ConvEngine::Winograd:
      case ConvEngine::Blas:
        BlasEngine<T>::backward_weight(masked(), x, g, dw, db);
        break;
    }
    ran(2, e);
  }
};

// With the AVX-512 engines: where oneDNN measured faster than Freight's, its reorders counted
// (freight_conv_libs, bench/results/conv-libs-*.md; every zoo convolution, batch 64 and 256):
//  * the input gradient of a strided convolution with more than one tap, which Freight runs as
//    im2col panels and col2im (Panel): 1.8-2.2x;
//  * both channel counts at least two 16-lane vectors (32) on small planes (at most 256 output
//    pixels), where Freight's direct tiles spend more of their time at the plane's edges and
//    oneDNN's blocked kernels hold a whole plane: 1.03-1.4x on every pass but the weight
//    gradient of a strided convolution (0.9x);
//  * the forward of a stride-1 convolution with one vector of output channels whose implicit
//    tiles waste a fifth of their work on padding columns (LeNet-5's second): 1.16-1.41x.
// Elsewhere Freight's engines win, often by 1.2-10x: few channels (first layers, 16-channel
// stages), larger planes, and 1x1 convolutions, whose few taps cannot pay for the reorders.
// With the AVX2 tiles (8 lanes, 12 accumulators), on the AMD EPYC Zen 3:
//  * the weight gradient stays on Freight's engines everywhere (its direct and implicit tiles:
//    1.0-2.6x oneDNN's, lenet5.c2 130 against 50 GF/s, resnet56's 16-channel stage 117 against
//    64; its Winograd, below, faster still on 3x3 layers of 16 or more channels);
//  * the input gradient goes to oneDNN where it is strided (Panel and col2im: 0.5x), where the
//    input has 32 channels or more (1.1-1.4x), and where it has 6 or more but less than a vector
//    (LeNet-5's second: 1.15-1.35x); 16 channels stay (resnet56: 1.0-1.2x ours), and so do fewer
//    than 6, where oneDNN pads its 8-channel blocks (0.3-0.4x);
//  * the forward goes to oneDNN for first layers (3 input channels or fewer) with 32 outputs or
//    more (1.2-1.6x: each tile's few taps cannot pay for its stores) and, as on AVX-512, where
//    both channel counts are 32 or more on planes of at most 256 output pixels (alexnet-cifar's
//    second and third: 1.06-1.25x in its steps; resnet56's 32- and 64-channel stages within the
//    host's noise either way).
// Without any tiles (the built-in baseline kernels: im2col + BLAS only), oneDNN measured 1.3-2.5x
// faster on every pass of a convolution with more than one tap, except the input gradient of
// layers on fewer than 6 input channels (0.3-0.7x) and the weight gradient of one-channel ones
// (0.5-0.7x); 1x1 convolutions stay on BLAS (0.7-0.9x).
// oneDNN's Winograd F(4x4, 3x3) (conv_dnnl.h) takes 3x3 stride-1 convolutions on whole 16-channel
// vectors; with the AVX-512 kernels Auto sends it every pass of those with 32 or more input and
// output channels from batch 8. Measured on the AMD EPYC Zen 4, 2 threads, reorders counted,
// against the best of Freight's engines and oneDNN's direct one (freight_conv_libs and
// in the steps): resnet56's 32- and 64-channel stages 1.2-2.1x at batch 8 to 256, mnist-cnn's
// 32 -> 64 layer 1.3-1.7x, on one thread as on two; mnist-cnn's step at batch 64 1.2x. Not
// taken: 16 channels (resnet56's first stage: 0.6-0.7x forward and input gradient, the weight
// gradient 0.8-1.3x run to run), batch 1 (0.5-1.0x: the transforms of one image cost more than
// they save). The multiplies it saves are paid in rounding: against float64 sums its relative
// error is about twice the direct sum's (6e-7 against 3e-7 on the engine tests' shapes).
bool winograd_preferred(const Conv2dGeometry& g, int pass) {
#if defined(__AVX512F__)
  (void)pass;  // the same rule for the three passes
  const bool shape = g.kh == 3 && g.kw == 3 && g.sh == 1 && g.sw == 1 && g.dh == 1 && g.dw == 1 &&
                     g.c % 16 == 0 && g.o % 16 == 0;
  return shape && g.n >= 8 && g.c >= 32 && g.o >= 32;
#else
  (void)g, (void)pass;
  return false;
#endif
}

// Freight's Winograd F(2x2, 3x3) (conv_winograd.h) for a 3x3 stride-1 convolution. With the AVX2
// kernels, measured on the AMD EPYC Zen 3 against the best of Freight's other engines and
// oneDNN's (freight_conv_libs, 1 and 2 threads, two runs):
//  * forward and input gradient: resnet56's 16-, 32- and 64-channel layers and mnist-cnn's
//    32 -> 64 at batch 64 and 256 1.1-2.0x; at batch 8, 1.2-1.5x where the batch has 2048 output
//    pixels or more (16 and 32 channels, mnist-cnn), 0.6-1.0x below (64 channels on 8x8 planes:
//    the weights' transform and the few tiles per image do not pay); batch 1 0.3-1.0x.
//  * weight gradient (against the direct tiles, alternated four times each): 1.2-1.7x on the
//    same layers from batch 1 to 256 (1.2-1.5x at batch 1, the transforms' cost falling on the
//    output gradient and the input alike, with no weights to transform).
// Not taken: fewer than 16 channels on either side (resnet56's 3-channel stem 0.4-0.7x, 8 output
// channels 0.7-0.9x: their channel vectors mostly padding). With the AVX-512 kernels not taken at
// all: oneDNN's own Winograd F(4x4, 3x3) runs the wide layers there, and this engine was not
// measured on an AVX-512 machine.
bool winograd_f2_preferred(const Conv2dGeometry& g, int pass) {
#if defined(FREIGHT_CONV_TILES) && !defined(__AVX512F__)
  const bool wide = g.c >= 16 && g.o >= 16;
  return wide && (pass == 2 || g.n * g.oh * g.ow >= 2048);
#else
  (void)g, (void)pass;
  return false;
#endif
}

bool dnnl_preferred(const Conv2dGeometry& g, int pass) {
  const bool strided = g.sh != 1 || g.sw != 1, taps = g.kh * g.kw > 1;
  if (!taps) return false;
#if defined(__AVX512F__)
  if (pass == 1 && strided) return true;
  // The forward of a stride-1 convolution whose output channels fill one vector at most, on a
  // plane where the implicit tiles (what pick() runs there) spend over a fifth of their work on
  // the padded row's columns, with taps enough to pay for the reorders: oneDNN's blocked kernel
  // computes only output pixels. LeNet-5's 6 -> 16 5x5 layer (14x14 in, 10x10 out, 69% of the
  // computed pixels wanted): 1.37-1.41x on the AMD EPYC Zen 4, 1.16-1.19x on the Xeon, at batch
  // 64 and 256 (freight_conv_libs); at batch 1 the reorders cost more than that (9 -> 10 µs).
  if (pass == 0 && !strided && g.n >= 16 && g.o <= Simd<float>::kLanes && g.c * g.kh * g.kw >= 64 &&
      ImplicitEngine<float>::efficiency(g) < 0.8)
    return true;
  const bool wide = g.c >= 32 && g.o >= 32, small = g.oh * g.ow <= 256;
  return wide && small && !(pass == 2 && strided);
#elif defined(FREIGHT_CONV_TILES)
  constexpr int64_t W = Simd<float>::kLanes;
  if (pass == 1) return strided || g.c >= 32 || (g.c >= 6 && g.c < W);
  if (pass == 0) return (g.c <= 3 && g.o >= 32) || (g.c >= 32 && g.o >= 32 && g.oh * g.ow <= 256);
  return false;
#else
  (void)strided;
  return pass == 0 || (pass == 1 && g.c >= 6) || (pass == 2 && g.c >= 3);
#endif
}

// ================================================================ entry points
template <class T>
void forward_typed(const Tensor& xt, const Tensor& wt, const Tensor& bt, const Conv2dGeometry& g,
                   bool relu, Tensor& yt) {
  const T* bias = bt.defined() ? ptr<T>(bt) : nullptr;
  T* y = ptr<T>(yt);
  const int64_t P = g.oh * g.ow;
  if (g.c == 0) {  // no input channels: the output is the bias (through relu)
    for (int64_t i = 0; i < g.n * g.o; ++i) {
      const T v = bias ? bias[i % g.o] : T(0);
      std::fill(y + i * P, y + (i + 1) * P, relu ? relu_value(v) : v);
    }
    return;
  }
  Engine<T>::forward(ptr<T>(xt), ptr<T>(wt), bias, g, y, relu);
}

template <class T>
void backward_input_typed(const Tensor& gyt, const Tensor& wt, const Conv2dGeometry& g,
                          Tensor& gxt) {
  if (gxt.numel() == 0) return;
  Engine<T>::backward_input(ptr<T>(gyt), ptr<T>(wt), g, ptr<T>(gxt));
}

template <class T>
void backward_weight_typed(const Tensor& gyt, const Tensor& xt, const Conv2dGeometry& g,
                           const Tensor& relu_output, Tensor& gwt, Tensor& gbt) {
  T* dw = gwt.defined() && gwt.numel() > 0 ? ptr<T>(gwt) : nullptr;
  T* db = gbt.defined() ? ptr<T>(gbt) : nullptr;
  if (!dw && !db) return;
  FREIGHT_CHECK(!relu_output.defined() ||
                    (relu_output.is_contiguous() && relu_output.numel() == gyt.numel() &&
                     relu_output.dtype() == gyt.dtype()),
                "conv2d_backward_weight: the ReLU's output must be packed like gy");
  Engine<T>::backward_weight(ptr<T>(gyt), dw ? ptr<T>(xt) : nullptr, g, dw, db,
                             relu_output.defined() ? ptr<T>(relu_output) : nullptr);
}

void forward_cpu(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dGeometry& g,
                 bool relu, Tensor& y) {
  dispatch_floating(x.dtype(), "conv2d_forward",
                    [&](auto tag) { forward_typed<decltype(tag)>(x, w, b, g, relu, y); });
}
void backward_input_cpu(const Tensor& gy, const Tensor& w, const Conv2dGeometry& g, Tensor& gx) {
  dispatch_floating(gy.dtype(), "conv2d_backward_input",
                    [&](auto tag) { backward_input_typed<decltype(tag)>(gy, w, g, gx); });
}
void backward_weight_cpu(const Tensor& gy, const Tensor& x, const Conv2dGeometry& g,
                         const Tensor& relu_output, Tensor& gw, Tensor& gb) {
  dispatch_floating(gy.dtype(), "conv2d_backward_weight", [&](auto tag) {
    backward_weight_typed<decltype(tag)>(gy, x, g, relu_output, gw, gb);
  });
}

#if defined(FREIGHT_CONV_TILES)
// Elements a pass takes on the tile engine `e` (pick's choice for it), from the same numbers the
// pass allocates by.
template <class T>
int64_t tile_workspace_elems(const Conv2dGeometry& g, int pass, ConvEngine e) {
  switch (e) {
    case ConvEngine::Implicit:
      return pass == 0   ? ImplicitEngine<T>::forward_work(g).elems()
             : pass == 1 ? ImplicitEngine<T>::backward_input_elems(g)
                         : ImplicitEngine<T>::backward_weight_work(g).elems();
    case ConvEngine::Direct:
      return pass == 0   ? DirectEngine<T>::forward_work(g).elems()
             : pass == 1 ? DirectEngine<T>::backward_input_elems(g)
                         : DirectEngine<T>::backward_weight_work(g).elems();
    case ConvEngine::Panel:
      return pass == 0   ? PanelEngine<T>::forward_work(g).elems()
             : pass == 1 ? PanelEngine<T>::backward_input_work(g).elems()
                         : PanelEngine<T>::backward_weight_work(g).elems();
    case ConvEngine::WinogradF2:
      return pass == 0   ? WinogradEngine<T>::forward_work(g).elems()
             : pass == 1 ? WinogradEngine<T>::backward_input_elems(g)
                         : WinogradEngine<T>::backward_weight_work(g).elems();
    case ConvEngine::Auto:
    case ConvEngine::Dnnl:
    case ConvEngine::Winograd:
    case ConvEngine::Blas:
      break;
  }
  return 0;
}
#endif

// conv2d_workspace_bytes: what a pass takes from the allocator beyond its operands. oneDNN's
// arena where it runs (its blocked copies and scratchpad, from the primitive the pass will use);
// otherwise the engine's buffers, from the numbers its pass allocates by (BlasWork, TileWork).
int64_t workspace_bytes_cpu(const Conv2dGeometry& g, int pass, DType dtype) {
  const int64_t elem = int64_t(dtype_size(dtype));
  if (dtype == DType::F32)
    for (ConvEngine e : kDnnlEngines)
      if (use_dnnl(g, pass, e)) {
        const int64_t arena = dnnl_conv_arena_bytes(g, pass, dnnl_threads(g), algorithm_of(e));
        if (arena >= 0) return arena;
      }
  const ConvEngine e = pick(g, pass);
  if (e == ConvEngine::Blas) {
    const BlasWork bw = blas_work(g, pass, size_t(elem));
    return bw.nt * bw.per_thread * elem;
  }
#if defined(FREIGHT_CONV_TILES)
  const int64_t elems = dtype == DType::F64 ? tile_workspace_elems<double>(g, pass, e)
                                            : tile_workspace_elems<float>(g, pass, e);
  return elems * elem;
#else
  return 0;  // pick runs every pass on Blas without the tile engines
#endif
}

bool tile_engines_built() {
#if defined(FREIGHT_CONV_TILES)
  return true;
#else
  return false;
#endif
}

}  // namespace

FREIGHT_REGISTER_KERNEL(conv_tile_engines_built, CPU, tile_engines_built);

FREIGHT_REGISTER_KERNEL(kernels::conv2d_forward, CPU, forward_cpu);
FREIGHT_REGISTER_KERNEL(kernels::conv2d_backward_input, CPU, backward_input_cpu);
FREIGHT_REGISTER_KERNEL(kernels::conv2d_backward_weight, CPU, backward_weight_cpu);
FREIGHT_REGISTER_KERNEL(kernels::conv2d_workspace_bytes, CPU, workspace_bytes_cpu);

}  // namespace freight::cpu
