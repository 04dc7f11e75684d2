// Freight's own engines of the CPU convolution (float32 and float64), used by conv_cpu.cpp, on
// the register tiles of conv_tiles.h (AVX-512 or AVX2 with FMA):
//  * PanelEngine (any stride): im2col rows written straight into the panel layout of the
//    register tile, so there is no separate packing pass; col2im for the input gradient.
//  * ImplicitEngine (stride 1): no unrolling at all; the tiles read shifted windows of the
//    zero-padded input planes, output channels x pixels.
//  * DirectEngine (horizontal stride 1 or 2): output pixels x vectors of output channels,
//    broadcast from the padded input; no work on padding columns, whole rows of small images.
// The input gradient of a stride-1 convolution runs as a forward convolution on either of the
// last two.
#pragma once
#include "backend/cpu/conv_tiles.h"
#if defined(FREIGHT_CONV_TILES)
#include <vector>

#include "backend/cpu/conv_patches.h"

namespace freight::cpu::conv_detail {

using conv_tiles::gemm_tile_rows;
using conv_tiles::kMK;
using conv_tiles::kMO;
using conv_tiles::kMR;
using conv_tiles::kNV;
using conv_tiles::Simd;

// Packs A [M, K] (element (m, k) at a[m·rs + k·cs]) into micro-panels of kMR rows: block mb
// holds rows [mb·8, mb·8 + mr) as [K][mr] at offset mb·8·K.
template <class T>
void pack_a(const T* a, int64_t M, int64_t K, int64_t rs, int64_t cs, T* out) {
  for (int64_t m0 = 0; m0 < M; m0 += kMR) {
    const int64_t mr = std::min<int64_t>(kMR, M - m0);
    T* dst = out + m0 * K;
    for (int64_t k = 0; k < K; ++k)
      for (int64_t m = 0; m < mr; ++m) dst[k * mr + m] = a[(m0 + m) * rs + k * cs];
  }
}

// Fills B panels for `rows` rows over `n` pixels: row r comes from fill(r, rowbuf) (n values),
// and panel j (pixels [j·NR, j·NR + NR)) is stored as [rows][NR] at j·rows·NR. The last panel's
// missing pixels are zeros.
template <class T, class Fill>
void pack_b(int64_t rows, int64_t n, T* rowbuf, T* out, Fill&& fill) {
  constexpr int64_t NR = kNV * Simd<T>::kLanes;
  const int64_t panels = (n + NR - 1) / NR;
  std::fill(rowbuf + n, rowbuf + panels * NR, T(0));
  for (int64_t r = 0; r < rows; ++r) {
    fill(r, rowbuf);
    for (int64_t j = 0; j < panels; ++j) {
      const T* src = rowbuf + j * NR;
      T* dst = out + (j * rows + r) * NR;
#pragma omp simd
      for (int64_t u = 0; u < NR; ++u) dst[u] = src[u];
    }
  }
}

// Σ row[0, n) for n a multiple of the lane count.
template <class T>
T row_sum(const T* row, int64_t n) {
  using S = Simd<T>;
  typename S::V s = S::zero();
  for (int64_t j = 0; j < n; j += S::kLanes) s = S::add(s, S::load(row + j));
  return S::sum(s);
}

// Σ p[0, n) for any n (masked tail).
template <class T>
T sum_n(const T* p, int64_t n) {
  using S = Simd<T>;
  typename S::V s = S::zero();
  int64_t j = 0;
  for (; j + S::kLanes <= n; j += S::kLanes) s = S::add(s, S::load(p + j));
  if (j < n) s = S::add(s, S::load_n(p + j, int(n - j)));
  return S::sum(s);
}

// Sums the threads' partial dW [O, Kp] (then db [O]) blocks, dropping padding columns.
template <class T>
void sum_partials(const T* base, int64_t per_thread, int nt, int64_t O, int64_t K, int64_t Kp,
                  T* dw, T* db) {
  for (int64_t o = 0; o < O; ++o) {
    if (dw)
      for (int64_t k = 0; k < K; ++k) {
        T s = 0;
        for (int t = 0; t < nt; ++t) s += base[t * per_thread + o * Kp + k];
        dw[o * K + k] = s;
      }
    if (db) {
      T s = 0;
      for (int t = 0; t < nt; ++t) s += base[t * per_thread + O * Kp + o];
      db[o] = s;
    }
  }
}

// The threads and scratch of one pass of a tile engine, in one allocation: `shared` elements
// for the whole pass (packed or transposed weights), then `per_thread` for each of nt threads,
// whose first `acc` are partial sums (weight gradients). The passes and conv2d_workspace_bytes
// (what freight plan counts) read the same numbers.
struct TileWork {
  int nt = 1;
  int64_t L = 0;   // pixels per chunk (Panel)
  int64_t nb = 0;  // images per group (weight gradients of Implicit and Direct)
  int64_t acc = 0;
  int64_t shared = 0, per_thread = 0;
  int64_t elems() const { return shared + nt * per_thread; }
};

// ---------------------------------------------------------------- panel engine (any stride)
// The im2col formulation above with B written straight into the micro-kernel's panel layout.
template <class T>
struct PanelEngine {
  static constexpr int64_t W = Simd<T>::kLanes, NR = kNV * W;

  static TileWork forward_work(const Conv2dGeometry& g) {
    const int64_t K = g.c * g.kh * g.kw, NP = g.n * g.oh * g.ow;
    TileWork wk;
    wk.nt = threads_for(double(NP) * double(K * g.o), (NP + NR - 1) / NR);
    wk.L = chunk_pixels(K, sizeof(T), NR, (NP + wk.nt - 1) / wk.nt);
    wk.shared = round_up(g.o * K, W);            // the packed weights
    wk.per_thread = K * wk.L + wk.L + kMR * NR;  // B panels, a row, an edge tile
    return wk;
  }

  static void forward(const T* x, const T* w, const T* bias, const Conv2dGeometry& g, T* y,
                      bool relu = false) {
    const int64_t K = g.c * g.kh * g.kw, P = g.oh * g.ow, O = g.o, NP = g.n * P;
    const TileWork wk = forward_work(g);
    const int nt = wk.nt;
    const int64_t L = wk.L, a_sz = wk.shared, per_thread = wk.per_thread;
    Tensor ws = Tensor::empty({wk.elems()}, dtype_of<T>());
    T* ap = ptr<T>(ws);
    pack_a(w, O, K, K, 1, ap);
    std::vector<int64_t> offs(K);  // row k of a panel
    for (int64_t k = 0; k < K; ++k) offs[k] = k * NR;
    split_threads(nt, NP, NR, [&](int t, int64_t b, int64_t e) {
      T* bp = ap + a_sz + t * per_thread;  // B panels of the chunk
      T* rowbuf = bp + K * L;
      T* tile = rowbuf + L;
      for (int64_t c0 = b; c0 < e; c0 += L) {
        const int64_t c1 = std::min(e, c0 + L), n = c1 - c0;
        pack_b(K, n, rowbuf, bp, [&](int64_t k, T* row) { patch_row(x, g, k, c0, c1, row); });
        for (int64_t j = 0; j * NR < n; ++j) {
          const int64_t t0 = c0 + j * NR, t1 = std::min(c1, t0 + NR);
          const int64_t img = t0 / P, p0 = t0 % P;
          // A full tile inside one image goes straight to y; others through `tile`.
          const bool direct = t1 - t0 == NR && p0 + NR <= P;
          for (int64_t m0 = 0; m0 < O; m0 += kMR) {
            const int mr = int(std::min<int64_t>(kMR, O - m0));
            const T* init = bias ? bias + m0 : nullptr;
            const T* bj = bp + j * K * NR;
            if (direct) {
              gemm_tile_rows(mr, ap + m0 * K, bj, offs.data(), K, init, y + (img * O + m0) * P + p0,
                             P);
              continue;
            }
            gemm_tile_rows(mr, ap + m0 * K, bj, offs.data(), K, init, tile, NR);
            for_image_pieces(t0, t1, P, [&](int64_t im, int64_t q0, int64_t q1, int64_t pos) {
              for (int m = 0; m < mr; ++m)
                copy_n(tile + m * NR + pos, q1 - q0, y + (im * O + m0 + m) * P + q0);
            });
          }
        }
        if (relu)  // the chunk's outputs, just written
          for_image_pieces(c0, c1, P, [&](int64_t im, int64_t q0, int64_t q1, int64_t) {
            for (int64_t o = 0; o < O; ++o) relu_in_place(y + (im * O + o) * P + q0, q1 - q0);
          });
      }
    });
  }

  // dcol = Wᵀ · dY per chunk, kMR rows of dcol at a time, each scattered back by col2im.
  static TileWork backward_input_work(const Conv2dGeometry& g) {
    const int64_t K = g.c * g.kh * g.kw, NP = g.n * g.oh * g.ow;
    TileWork wk;
    // Threads own whole images (col2im of one image from two threads would race).
    wk.nt = threads_for(double(NP) * double(K * g.o), g.n);
    wk.L = chunk_pixels(g.o + kMR, sizeof(T), NR, (NP + wk.nt - 1) / wk.nt);
    wk.shared = round_up(K * g.o, W);                // the packed Wᵀ
    wk.per_thread = g.o * wk.L + wk.L + kMR * wk.L;  // dY panels, a row, kMR rows of dcol
    return wk;
  }

  static void backward_input(const T* gy, const T* w, const Conv2dGeometry& g, T* dx) {
    const int64_t K = g.c * g.kh * g.kw, P = g.oh * g.ow, O = g.o, NP = g.n * P;
    const TileWork wk = backward_input_work(g);
    const int nt = wk.nt;
    const int64_t L = wk.L, a_sz = wk.shared, per_thread = wk.per_thread;
    Tensor ws = Tensor::empty({wk.elems()}, dtype_of<T>());
    T* ap = ptr<T>(ws);
    pack_a(w, K, O, 1, K, ap);  // Wᵀ: row k of Wᵀ is column k of W [O, K]
    std::vector<int64_t> offs(O);
    for (int64_t o = 0; o < O; ++o) offs[o] = o * NR;
    split_threads(nt, NP, P, [&](int t, int64_t b, int64_t e) {
      T* bp = ap + a_sz + t * per_thread;  // dY panels
      T* rowbuf = bp + O * L;
      T* dcol = rowbuf + L;  // kMR rows of dcol over the chunk, row stride L
      std::fill(dx + b / P * g.c * g.h * g.w, dx + e / P * g.c * g.h * g.w, T(0));
      for (int64_t c0 = b; c0 < e; c0 += L) {
        const int64_t c1 = std::min(e, c0 + L), n = c1 - c0;
        pack_b(O, n, rowbuf, bp, [&](int64_t o, T* row) { grad_row(gy, g, o, c0, c1, row); });
        for (int64_t m0 = 0; m0 < K; m0 += kMR) {
          const int mr = int(std::min<int64_t>(kMR, K - m0));
          for (int64_t j = 0; j * NR < n; ++j)
            gemm_tile_rows(mr, ap + m0 * O, bp + j * O * NR, offs.data(), O,
                           static_cast<const T*>(nullptr), dcol + j * NR, L);
          for (int m = 0; m < mr; ++m) scatter_row(dcol + m * L, g, m0 + m, c0, c1, dx);
        }
      }
    });
  }

  // dW tiles over plain col [Kp, L] and dY [O, L] rows of each chunk.
  static TileWork backward_weight_work(const Conv2dGeometry& g) {
    const int64_t K = g.c * g.kh * g.kw, NP = g.n * g.oh * g.ow, Kp = round_up(K, kMK);
    TileWork wk;
    wk.nt = threads_for(double(NP) * double(K * g.o), (NP + W - 1) / W);
    wk.L = chunk_pixels(Kp + g.o, sizeof(T), W, (NP + wk.nt - 1) / wk.nt);
    wk.acc = round_up(g.o * Kp + g.o, W);        // partial dW [O, Kp], then db [O]
    wk.per_thread = wk.acc + (Kp + g.o) * wk.L;  // then col [Kp, L] and dY [O, L]
    return wk;
  }

  static void backward_weight(const T* gy, const T* x, const Conv2dGeometry& g, T* dw, T* db) {
    const int64_t K = g.c * g.kh * g.kw, O = g.o, NP = g.n * g.oh * g.ow;
    const int64_t Kp = round_up(K, kMK);  // col rows padded with zeros to whole tiles
    const TileWork wk = backward_weight_work(g);
    const int nt = wk.nt;
    const int64_t L = wk.L, acc_sz = wk.acc, per_thread = wk.per_thread;
    Tensor ws = Tensor::empty({wk.elems()}, dtype_of<T>());
    split_threads(nt, NP, W, [&](int t, int64_t b, int64_t e) {
      T* pw = ptr<T>(ws) + t * per_thread;  // partial dW [O, Kp], then db [O]
      T* pb = pw + O * Kp;
      T* col = pw + acc_sz;   // [Kp, L]
      T* dyc = col + Kp * L;  // [O, L]
      std::fill(pw, pw + O * Kp + O, T(0));
      for (int64_t c0 = b; c0 < e; c0 += L) {
        const int64_t c1 = std::min(e, c0 + L), n = c1 - c0, nl = round_up(n, W);
        for (int64_t o = 0; o < O; ++o) {
          T* row = dyc + o * L;
          grad_row(gy, g, o, c0, c1, row);
          std::fill(row + n, row + nl, T(0));
          pb[o] += row_sum(row, nl);
        }
        if (!dw) continue;
        for (int64_t k = 0; k < Kp; ++k) {
          T* row = col + k * L;
          if (k < K) {
            patch_row(x, g, k, c0, c1, row);
            std::fill(row + n, row + nl, T(0));
          } else {
            std::fill(row, row + nl, T(0));
          }
        }
        for (int64_t o0 = 0; o0 < O; o0 += kMO) {
          const int mo = int(std::min<int64_t>(kMO, O - o0));
          for (int64_t k0 = 0; k0 < Kp; k0 += kMK) {
            const int64_t koff[kMK] = {k0 * L, (k0 + 1) * L, (k0 + 2) * L};
            conv_tiles::dw_tile_rows(mo, dyc + o0 * L, L, 0, col, koff, 0, 1, nl, pw + o0 * Kp + k0,
                                     Kp);
          }
        }
      }
    });
    sum_partials(ptr<T>(ws), per_thread, nt, O, K, Kp, dw, db);
  }
};

// ---------------------------------------------------------------- input gradient as a convolution
// The input gradient of a stride-1 convolution is itself a stride-1 convolution: of dY, padded
// by dh·(kh − 1) − ph (and likewise in width), with the weights transposed over (O, C) and
// flipped in both kernel dimensions:
//   dx[c][h][w] = Σ_{o, p, q} dY[o][h + ph − p·dh][w + pw − q·dw] · W[o][c][p][q].
// Applicable when that padding is not negative.
inline bool input_grad_is_conv(const Conv2dGeometry& g) {
  return g.sh == 1 && g.sw == 1 && g.dh * (g.kh - 1) >= g.ph && g.dw * (g.kw - 1) >= g.pw;
}
inline Conv2dGeometry input_grad_geometry(const Conv2dGeometry& g) {
  Conv2dGeometry t = g;
  t.c = g.o, t.h = g.oh, t.w = g.ow;
  t.o = g.c, t.oh = g.h, t.ow = g.w;
  t.ph = g.dh * (g.kh - 1) - g.ph, t.pw = g.dw * (g.kw - 1) - g.pw;
  return t;
}
// f[c][o][kh − 1 − p][kw − 1 − q] = w[o][c][p][q].
template <class T>
void flip_weights(const T* w, const Conv2dGeometry& g, T* f) {
  for (int64_t o = 0; o < g.o; ++o)
    for (int64_t c = 0; c < g.c; ++c)
      for (int64_t p = 0; p < g.kh; ++p)
        for (int64_t q = 0; q < g.kw; ++q)
          f[((c * g.o + o) * g.kh + (g.kh - 1 - p)) * g.kw + (g.kw - 1 - q)] =
              w[((o * g.c + c) * g.kh + p) * g.kw + q];
}
// The input gradient of a stride-1 convolution (input_grad_is_conv) as engine E's forward of dY
// with the flipped weights.
template <class E, class T>
void input_grad_as_forward(const T* gy, const T* w, const Conv2dGeometry& g, T* dx) {
  Tensor f = Tensor::empty({g.c * g.o * g.kh * g.kw}, dtype_of<T>());
  flip_weights(w, g, ptr<T>(f));
  E::forward(gy, ptr<T>(f), nullptr, input_grad_geometry(g), dx);
}
// Its workspace: the flipped weights, live through the forward's own.
template <class E>
int64_t input_grad_as_forward_elems(const Conv2dGeometry& g) {
  return g.c * g.o * g.kh * g.kw + E::forward_work(input_grad_geometry(g)).elems();
}

// ---------------------------------------------------------------- implicit engine (stride 1)
// With stride 1 no patches need to be unrolled. Copy the image into a zero-padded plane of width
// Wp = W + 2·pw and number the outputs by "virtual" pixels t = i·Wp + j, j < Wp (the columns
// j >= OW are computed and thrown away). Then the B row of weight tap (ci, p, q) is the padded
// plane itself shifted by off = ci·Hp·Wp + p·dh·Wp + q·dw:
//   B[(ci, p, q)][t] = xpad[off + t],
// so the GEMM tile reads shifted windows of the padded image (offsets instead of packed panels).
// The price is the wasted columns, (Wp − OW)/Wp, and the last partial tile of each image.
template <class T>
struct ImplicitEngine {
  static constexpr int64_t W = Simd<T>::kLanes, NR = kNV * W;

  struct Layout {
    int64_t hp, wp, plane, pv, tiles, pvp, xsz;
  };
  static Layout layout(const Conv2dGeometry& g) {
    Layout l;
    l.hp = g.h + 2 * g.ph, l.wp = g.w + 2 * g.pw, l.plane = l.hp * l.wp;
    l.pv = g.oh * l.wp;  // virtual pixels of one image
    l.tiles = (l.pv + NR - 1) / NR, l.pvp = l.tiles * NR;
    // Zeroed slack after the last plane: tiles overrun pv by up to NR − 1 and a tap's shift
    // within a row by (kw − 1)·dw (those reads only feed thrown-away columns, or meet zeros).
    l.xsz = round_up(g.c * l.plane + l.pvp + (g.kw - 1) * g.dw, W);
    return l;
  }

  // Copies image x [C, H, W] into the zero-padded planes of xp (l.xsz values).
  static void pad_image(const T* x, const Conv2dGeometry& g, const Layout& l, T* xp) {
    for (int64_t ci = 0; ci < g.c; ++ci) {
      T* d = xp + ci * l.plane;
      const T* s = x + ci * g.h * g.w;
      std::fill(d, d + g.ph * l.wp, T(0));
      d += g.ph * l.wp;
      for (int64_t r = 0; r < g.h; ++r, d += l.wp, s += g.w) {
        for (int64_t c = 0; c < g.pw; ++c) d[c] = T(0);
        copy_n(s, g.w, d + g.pw);
        for (int64_t c = g.pw + g.w; c < l.wp; ++c) d[c] = T(0);
      }
      std::fill(d, d + g.ph * l.wp, T(0));
    }
    std::fill(xp + g.c * l.plane, xp + l.xsz, T(0));
  }

  static std::vector<int64_t> tap_offsets(const Conv2dGeometry& g, const Layout& l) {
    std::vector<int64_t> offs(g.c * g.kh * g.kw);
    for (int64_t ci = 0, k = 0; ci < g.c; ++ci)
      for (int64_t p = 0; p < g.kh; ++p)
        for (int64_t q = 0; q < g.kw; ++q) offs[k++] = ci * l.plane + p * g.dh * l.wp + q * g.dw;
    return offs;
  }

  // Where the lanes of one vector of virtual pixels go in the compact output: virtual pixel t
  // (row i = t / wp, column t % wp) is output pixel t − i·(wp − ow) when its column is < ow and
  // i < oh. Lanes of one row form one masked store at a common offset; a vector spans at most
  // lanes / wp + 2 rows.
  struct Segment {
    int64_t off;    // output index of lane 0 (lanes of this row land at off + lane)
    uint32_t mask;  // lanes of this row that are real output pixels
  };
  static constexpr int kMaxSegments = W + 1;
  static int segments(const Conv2dGeometry& g, const Layout& l, int64_t t0, Segment* seg) {
    int count = 0;
    for (int lane = 0; lane < W;) {
      const int64_t t = t0 + lane, i = t / l.wp, col = t % l.wp;
      const int run = int(std::min<int64_t>(W - lane, l.wp - col));  // lanes left in row i
      uint32_t mask = 0;
      if (i < g.oh)
        for (int q = 0; q < run; ++q)
          if (col + q < g.ow) mask |= 1u << (lane + q);
      if (mask) seg[count++] = {t0 - i * (l.wp - g.ow), mask};
      lane += run;
    }
    return count;
  }

  // Stores tile accumulators straight into the NCHW output, dropping the virtual columns.
  struct VirtualStore {
    T* y;       // output channel m0 of the image
    int64_t P;  // output plane size
    const Segment* seg[kNV];
    int nseg[kNV];
    bool relu;  // a fused ReLU on the way out
    void operator()(int m, int u, typename Simd<T>::V v) const {
      if (relu) v = Simd<T>::relu(v);
      T* base = y + m * P;
      for (int s = 0; s < nseg[u]; ++s)
        Simd<T>::store_mask(base + seg[u][s].off, v, seg[u][s].mask);
    }
  };

  static TileWork forward_work(const Conv2dGeometry& g) {
    const int64_t K = g.c * g.kh * g.kw;
    const Layout l = layout(g);
    TileWork wk;
    wk.nt = threads_for(double(g.n * l.pvp) * double(K * g.o), (g.n + 1) / 2);  // pairs
    wk.shared = round_up(g.o * K, W);  // the packed weights
    wk.per_thread = l.xsz;             // one padded image
    return wk;
  }

  // y = conv(x, w) + bias for stride 1 (weights [O][C][kh][kw] in w).
  static void forward(const T* x, const T* w, const T* bias, const Conv2dGeometry& g, T* y,
                      bool relu = false) {
    const int64_t K = g.c * g.kh * g.kw, P = g.oh * g.ow, O = g.o;
    const Layout l = layout(g);
    const TileWork wk = forward_work(g);
    const int nt = wk.nt;
    const int64_t a_sz = wk.shared, per_thread = wk.per_thread;
    Tensor ws = Tensor::empty({wk.elems()}, dtype_of<T>());
    T* ap = ptr<T>(ws);
    pack_a(w, O, K, K, 1, ap);
    const std::vector<int64_t> offs = tap_offsets(g, l);
    // Output segments of every tile vector, shared by all images.
    std::vector<Segment> segs(l.tiles * kNV * kMaxSegments);
    std::vector<int> nsegs(l.tiles * kNV);
    for (int64_t j = 0; j < l.tiles * kNV; ++j)
      nsegs[j] = segments(g, l, j * W, segs.data() + j * kMaxSegments);
    const int64_t img_in = g.c * g.h * g.w;
    // Without padding the image is its own padded plane; the tiles' overrun then reads the
    // next image (only thrown-away columns), so just the batch's last image needs the copy.
    const bool in_place = g.ph == 0 && g.pw == 0 && img_in >= l.xsz - g.c * l.plane;
    const int64_t lines = img_in * int64_t(sizeof(T)) / 64;
    // Tiles [j0, j1) of image img, whose padded planes are at src; `next` (or null) is the
    // image to bring towards the cache meanwhile.
    auto tiles = [&](int64_t img, const T* src, const char* next, int64_t j0, int64_t j1) {
      const int64_t per_tile = (lines + l.tiles - 1) / l.tiles;
      for (int64_t j = j0; j < j1; ++j) {
        if (next)
          for (int64_t q = j * per_tile; q < std::min(lines, (j + 1) * per_tile); ++q)
            _mm_prefetch(next + q * 64, _MM_HINT_T1);
        VirtualStore st{nullptr, P, {}, {}, relu};
        for (int u = 0; u < kNV; ++u) {
          st.seg[u] = segs.data() + (j * kNV + u) * kMaxSegments;
          st.nseg[u] = nsegs[j * kNV + u];
        }
        // The last tile computes only the vectors that reach a virtual pixel.
        const int nv = int(std::min<int64_t>(kNV, (l.pv - j * NR + W - 1) / W));
        for (int64_t m0 = 0; m0 < O; m0 += kMR) {
          st.y = y + (img * O + m0) * P;
          gemm_tile_rows(int(std::min<int64_t>(kMR, O - m0)), nv, ap + m0 * K, src + j * NR,
                         offs.data(), K, bias ? bias + m0 : nullptr, st);
        }
      }
    };
    // Too few images for the threads (batch 1): one image at a time, its tiles split (each
    // output pixel is computed by one tile, the same way on any thread).
    const int tile_threads = nt > 1 ? 1 : threads_for(double(g.n * l.pvp) * double(K * O), l.tiles);
    if (tile_threads > 1) {
      T* xp = ap + a_sz;
      for (int64_t img = 0; img < g.n; ++img) {
        const T* src = x + img * img_in;
        if (!(in_place && img + 1 < g.n)) {
          pad_image(src, g, l, xp);
          src = xp;
        }
        split_threads(tile_threads, l.tiles, 1,
                      [&](int, int64_t j0, int64_t j1) { tiles(img, src, nullptr, j0, j1); });
      }
      return;
    }
    dynamic_threads(nt, g.n, 2, [&](int t, int64_t b, int64_t e) {
      T* xp = ap + a_sz + t * per_thread;
      for (int64_t img = b; img < e; ++img) {
        const T* src = x + img * img_in;
        if (!(in_place && img + 1 < g.n)) {
          pad_image(src, g, l, xp);
          src = xp;
        }
        // Bring the next image towards the cache while this one computes.
        const char* next =
            img + 1 < e ? reinterpret_cast<const char*>(x + (img + 1) * img_in) : nullptr;
        tiles(img, src, next, 0, l.tiles);
      }
    });
  }

  // Share of the computed virtual pixels that are output pixels.
  static double efficiency(const Conv2dGeometry& g) {
    const Layout l = layout(g);
    const int64_t computed = l.pv / NR * NR + round_up(l.pv % NR, W);
    return double(g.oh * g.ow) / double(computed);
  }

  static void backward_input(const T* gy, const T* w, const Conv2dGeometry& g, T* dx) {
    input_grad_as_forward<ImplicitEngine>(gy, w, g, dx);
  }
  static int64_t backward_input_elems(const Conv2dGeometry& g) {
    return input_grad_as_forward_elems<ImplicitEngine>(g);
  }

  // dW from a group of images at a time: their padded planes (the B rows, as in the forward)
  // and their output gradients in the virtual layout, with zeros in the dropped columns so
  // those add nothing. With at least a vector's worth of output channels the sums run
  // transposed (dwt_tile: taps broadcast against vectors of channels), else along the pixels
  // (dw_tile).
  static TileWork backward_weight_work(const Conv2dGeometry& g) {
    const int64_t K = g.c * g.kh * g.kw, O = g.o;
    const bool transposed = O >= W;
    const int64_t Kp = transposed ? K : round_up(K, kMK);
    const int64_t ldo = transposed ? round_up(O, W) : O;
    const Layout l = layout(g);
    const int64_t lv = round_up(l.pv, W);
    const int64_t per_img = l.xsz + ldo * lv;  // a padded image and its virtual dY
    TileWork wk;
    wk.nt = threads_for(double(g.n * lv) * double(K * O), g.n);
    // Images per group: as many as fit the budget, at least 3 groups per thread (each thread
    // takes a fixed run of groups: see static_grains).
    const int64_t images = std::max<int64_t>(1, g.n / (3 * wk.nt));
    wk.nb = std::clamp<int64_t>(kChunkBytes / (per_img * int64_t(sizeof(T))), 1, images);
    wk.acc = round_up(Kp * ldo + O, W);  // partial dW, then db
    wk.per_thread = wk.acc + wk.nb * per_img;
    return wk;
  }

  static void backward_weight(const T* gy, const T* x, const Conv2dGeometry& g, T* dw, T* db) {
    const int64_t K = g.c * g.kh * g.kw, P = g.oh * g.ow, O = g.o;
    const bool transposed = O >= W;
    const int64_t Kp = transposed ? K : round_up(K, kMK);
    const int64_t ldo = transposed ? round_up(O, W) : O;  // dW accumulator row length
    const Layout l = layout(g);
    const int64_t lv = round_up(l.pv, W);  // pixels each tile row sums over
    const TileWork wk = backward_weight_work(g);
    const int nt = wk.nt;
    const int64_t nb = wk.nb, acc_sz = wk.acc, per_thread = wk.per_thread;
    Tensor ws = Tensor::empty({wk.elems()}, dtype_of<T>());
    std::vector<int64_t> koff = tap_offsets(g, l);
    koff.resize(Kp, g.c * l.plane);  // padding taps read the zero slack (xsz covers lv of it)
    for (int t = 0; t < nt; ++t)     // zero each thread's partial sums
      std::fill(ptr<T>(ws) + t * per_thread, ptr<T>(ws) + t * per_thread + Kp * ldo + O, T(0));
    static_grains(nt, g.n, nb, [&](int t, int64_t b, int64_t e) {
      T* pw = ptr<T>(ws) + t * per_thread;  // dW: [Kp][ldo] transposed, else [O][Kp]
      T* pb = pw + Kp * ldo;
      T* xp = pw + acc_sz;       // nb padded images, l.xsz apart
      T* dyv = xp + nb * l.xsz;  // nb virtual dY images, ldo·lv apart
      for (int64_t i0 = b; i0 < e; i0 += nb) {
        const int64_t cnt = std::min(nb, e - i0);
        for (int64_t i = 0; i < cnt; ++i) {
          const T* gyi = gy + (i0 + i) * O * P;
          for (int64_t o = 0; o < O; ++o) pb[o] += sum_n(gyi + o * P, P);
          if (!dw) continue;
          T* dv = dyv + i * ldo * lv;
          if (transposed) {
            transpose_grad(gyi, g, l, lv, ldo, dv);
          } else {
            for (int64_t o = 0; o < O; ++o) {
              T* row = dv + o * lv;
              std::fill(row, row + lv, T(0));
              for (int64_t r = 0; r < g.oh; ++r)
                copy_n(gyi + o * P + r * g.ow, g.ow, row + r * l.wp);
            }
          }
          pad_image(x + (i0 + i) * g.c * g.h * g.w, g, l, xp + i * l.xsz);
        }
        if (!dw) continue;
        if (transposed) {
          for (int64_t v0 = 0, ov; v0 < ldo / W; v0 += ov) {
            ov = conv_tiles::tile_vectors(ldo / W, v0);
            conv_tiles::dwt_tiles<T, 1>(int(ov), K, dyv + v0 * W, ldo, xp, koff.data(),
                                        {cnt, 1, lv, ldo * lv, l.xsz, 0}, pw + v0 * W);
          }
        } else {
          for (int64_t o0 = 0; o0 < O; o0 += kMO)
            for (int64_t k0 = 0; k0 < Kp; k0 += kMK)
              conv_tiles::dw_tile_rows(int(std::min<int64_t>(kMO, O - o0)), dyv + o0 * lv, lv,
                                       O * lv, xp, koff.data() + k0, l.xsz, cnt, lv,
                                       pw + o0 * Kp + k0, Kp);
        }
      }
    });
    // Sum the threads' partials.
    const T* base = ptr<T>(ws);
    for (int64_t o = 0; o < O; ++o) {
      if (dw)
        for (int64_t k = 0; k < K; ++k) {
          const int64_t at = transposed ? k * ldo + o : o * Kp + k;
          T sum = 0;
          for (int t = 0; t < nt; ++t) sum += base[t * per_thread + at];
          dw[o * K + k] = sum;
        }
      if (db) {
        T sum = 0;
        for (int t = 0; t < nt; ++t) sum += base[t * per_thread + Kp * ldo + o];
        db[o] = sum;
      }
    }
  }

  // dY of one image [O][oh·ow] in the transposed virtual layout: dyT[t·ldo + o] = gy[o][i·ow + j]
  // for t = i·wp + j, j < ow; zeros in the dropped columns, the rows t in [pv, lv) and the
  // channels o in [O, ldo). Blocks of lanes × lanes go through an in-register transpose.
  static void transpose_grad(const T* gy, const Conv2dGeometry& g, const Layout& l, int64_t lv,
                             int64_t ldo, T* dyT) {
    using S = Simd<T>;
    const int64_t P = g.oh * g.ow;
    typename S::V r[W];
    for (int64_t i = 0; i < g.oh; ++i) {
      for (int64_t j0 = 0; j0 < g.ow; j0 += W) {
        const int cnt = int(std::min<int64_t>(W, g.ow - j0));
        for (int64_t o0 = 0; o0 < ldo; o0 += W) {
          for (int q = 0; q < W; ++q)
            r[q] = o0 + q < g.o ? S::load_n(gy + (o0 + q) * P + i * g.ow + j0, cnt) : S::zero();
          conv_tiles::transpose(r);
          for (int q = 0; q < cnt; ++q) S::store(dyT + (i * l.wp + j0 + q) * ldo + o0, r[q]);
        }
      }
      std::fill(dyT + (i * l.wp + g.ow) * ldo, dyT + (i + 1) * l.wp * ldo, T(0));
    }
    std::fill(dyT + l.pv * ldo, dyT + lv * ldo, T(0));
  }
};
// ---------------------------------------------------------------- direct engine
// Output-channel-vectorised direct convolution (conv_tiles::direct_tile): rows of output pixels
// broadcast from the padded input against vectors of transposed weights. No unrolled patches
// for any stride (horizontal strides 1 and 2 are compiled in), no columns computed for padding,
// and whole rows of small images in one tile; the price is a transposition of each image's
// output from [pixel][channel] to NCHW, and channel vectors that O must fill.
template <class T>
struct DirectEngine {
  static constexpr int64_t W = Simd<T>::kLanes;
  // Bytes of transposed weights one k-chunk keeps in L1 while it sweeps an image.
  static constexpr int64_t kWeightChunkBytes = 16 << 10;
  // Outputs larger than this are streamed to memory (to_nchw): far beyond the caches, an output
  // written through them costs a read per line and evicts what the layer reads. The next layer
  // then reads it from memory, which a max pooling pays for in part; measured on a Zen 4 EPYC with
  // 1 MiB of L2 per core, it paid off on mnist-cnn's 32->64 forward at batch 64 (9.4 MB) and
  // alexnet's first layer at 256, not yet on that layer at 64 (8 MiB).
  static constexpr int64_t kStreamOutputBytes = int64_t(8) << 20;

  static bool applies(const Conv2dGeometry& g) { return g.sw == 1 || g.sw == 2; }

  // Share of the tiles' work that produces wanted outputs: channel vectors filled by O, and
  // the rows' tail tiles (narrower than the main width) counted at three quarters.
  static double efficiency(const Conv2dGeometry& g) {
    const int64_t ldo = round_up(g.o, W);
    const int main = conv_tiles::direct_pixels(conv_tiles::tile_vectors(ldo / W, 0));
    const int64_t full = g.ow / main * main;
    return double(g.o) / double(ldo) * (double(full) + 0.75 * double(g.ow - full)) / double(g.ow);
  }

  static void forward(const T* x, const T* w, const T* bias, const Conv2dGeometry& g, T* y,
                      bool relu = false) {
    if (g.sw == 1)
      run<1>(x, w, bias, g, y, relu);
    else
      run<2>(x, w, bias, g, y, relu);
  }

  static void backward_input(const T* gy, const T* w, const Conv2dGeometry& g, T* dx) {
    input_grad_as_forward<DirectEngine>(gy, w, g, dx);
  }
  static int64_t backward_input_elems(const Conv2dGeometry& g) {
    return input_grad_as_forward_elems<DirectEngine>(g);
  }

  static TileWork forward_work(const Conv2dGeometry& g) {
    const int64_t K = g.c * g.kh * g.kw, P = g.oh * g.ow, ldo = round_up(g.o, W);
    TileWork wk;
    wk.nt = threads_for(double(g.n * P) * double(K * g.o), g.n);
    // wT [K][ldo], then the bias, then the compacted wT of the border rows' runs
    wk.shared = round_up(K * ldo + ldo, W) + border_taps(g) * ldo;
    wk.per_thread = padded_size(g) + P * ldo;  // a padded image, its output [P][ldo]
    return wk;
  }

  // Output rows whose windows reach into the vertical padding multiply its zeros by the kernel
  // rows that land there. Those rows skip them: consecutive rows that keep the same kernel rows
  // [p0, p1) form a run, and a run short of some gets its own copy of the taps it keeps, in the
  // same (channel, kernel row, column) order, so every remaining product is summed in the order
  // of a full row. (The input gradient runs as a forward over dY padded by k − 1 − p: a 3x3
  // kernel's first and last two rows there are 1/13 of mnist-cnn's 32-to-64 input gradient.)
  struct RowRun {
    int64_t i0, i1;  // output rows
    int64_t p0, p1;  // kernel rows on real input rows
  };
  static std::vector<RowRun> row_runs(const Conv2dGeometry& g) {
    std::vector<RowRun> runs;
    for (int64_t i = 0; i < g.oh; ++i) {
      // Kernel row p reads padded row i·sh + p·dh; the real rows are [ph, ph + h).
      int64_t p0 = 0, p1 = g.kh;
      while (p0 < p1 && i * g.sh + p0 * g.dh < g.ph) ++p0;
      while (p1 > p0 && i * g.sh + (p1 - 1) * g.dh >= g.ph + g.h) --p1;
      if (!runs.empty() && runs.back().p0 == p0 && runs.back().p1 == p1)
        runs.back().i1 = i + 1;
      else
        runs.push_back({i, i + 1, p0, p1});
    }
    return runs;
  }
  // Taps kept by all the runs short of some kernel rows (their compacted wT has as many rows).
  static int64_t border_taps(const Conv2dGeometry& g) {
    int64_t taps = 0;
    for (const RowRun& r : row_runs(g))
      if (r.p1 - r.p0 < g.kh) taps += g.c * (r.p1 - r.p0) * g.kw;
    return taps;
  }
  // A padded copy of one image's planes; none without padding (the image is its own).
  static int64_t padded_size(const Conv2dGeometry& g) {
    const bool in_place = g.ph == 0 && g.pw == 0;
    return in_place ? 0 : round_up(g.c * (g.h + 2 * g.ph) * (g.w + 2 * g.pw), W);
  }

  template <int SW>
  static void run(const T* x, const T* w, const T* bias, const Conv2dGeometry& g, T* y, bool relu) {
    const int64_t K = g.c * g.kh * g.kw, P = g.oh * g.ow, O = g.o;
    const int64_t hp = g.h + 2 * g.ph, wp = g.w + 2 * g.pw, plane = hp * wp;
    const int64_t ldo = round_up(O, W);
    const bool in_place = g.ph == 0 && g.pw == 0;  // the image is its own padded plane
    const TileWork wk = forward_work(g);
    const int nt = wk.nt;
    const int64_t wt_sz = wk.shared, xp_sz = padded_size(g);
    Tensor ws = Tensor::empty({wk.elems()}, dtype_of<T>());
    T* wT = ptr<T>(ws);  // [K][ldo], then the bias padded to ldo
    T* bp = wT + K * ldo;
    for (int64_t k = 0; k < K; ++k)
      for (int64_t o = 0; o < ldo; ++o) wT[k * ldo + o] = o < O ? w[o * K + k] : T(0);
    for (int64_t o = 0; o < ldo; ++o) bp[o] = bias && o < O ? bias[o] : T(0);
    std::vector<int64_t> koff(K);
    for (int64_t ci = 0, k = 0; ci < g.c; ++ci)
      for (int64_t p = 0; p < g.kh; ++p)
        for (int64_t q = 0; q < g.kw; ++q) koff[k++] = ci * plane + p * g.dh * wp + q * g.dw;
    // The runs of rows and their taps: a full run uses wT and koff; one short of some kernel
    // rows, its compacted copy of both (after the bias).
    struct Taps {
      const T* wT;
      const int64_t* koff;
      int64_t K;
    };
    const std::vector<RowRun> runs = row_runs(g);
    std::vector<Taps> run_taps;
    std::vector<int64_t> border_koff(size_t(border_taps(g)));
    T* border_wT = wT + round_up(K * ldo + ldo, W);
    for (int64_t r = 0, used = 0; r < int64_t(runs.size()); ++r) {
      const RowRun& run = runs[size_t(r)];
      if (run.p1 - run.p0 == g.kh) {
        run_taps.push_back({wT, koff.data(), K});
        continue;
      }
      const int64_t first = used;
      for (int64_t ci = 0; ci < g.c; ++ci)
        for (int64_t p = run.p0; p < run.p1; ++p)
          for (int64_t q = 0; q < g.kw; ++q, ++used) {
            const int64_t k = (ci * g.kh + p) * g.kw + q;
            border_koff[size_t(used)] = koff[size_t(k)];
            std::copy_n(wT + k * ldo, ldo, border_wT + used * ldo);
          }
      run_taps.push_back({border_wT + first * ldo, border_koff.data() + first, used - first});
    }
    const int64_t img_in = g.c * g.h * g.w;
    // Output rows [i0, i1) of one run's taps (padded input src) into yT [P][ldo]: each row's
    // sums run in the same order whichever thread computes it.
    auto run_rows = [&](const Taps& t, const T* src, T* yT, int64_t i0, int64_t i1) {
      if (t.K == 0) {  // every kernel row on padding: the bias alone
        for (int64_t px = i0 * g.ow; px < i1 * g.ow; ++px)
          for (int64_t o = 0; o < ldo; ++o) yT[px * ldo + o] = bias ? bp[o] : T(0);
        return;
      }
      for (int64_t v0 = 0, ov; v0 < ldo / W; v0 += ov) {
        ov = conv_tiles::tile_vectors(ldo / W, v0);
        const int64_t o0 = v0 * W;
        const int64_t kc =
            std::clamp<int64_t>(kWeightChunkBytes / (ov * W * int64_t(sizeof(T))), 16, t.K);
        for (int64_t k0 = 0; k0 < t.K; k0 += kc) {
          const int64_t kn = std::min(kc, t.K - k0);
          for (int64_t i = i0; i < i1; ++i)
            conv_tiles::direct_row<T, SW>(
                int(ov), g.ow, t.wT + k0 * ldo + o0, ldo, src + i * g.sh * wp, t.koff + k0, kn,
                bias ? bp + o0 : nullptr, k0 > 0, yT + i * g.ow * ldo + o0);
        }
      }
    };
    auto rows = [&](const T* src, T* yT, int64_t i0, int64_t i1) {
      for (size_t r = 0; r < runs.size(); ++r) {
        const int64_t a = std::max(i0, runs[r].i0), b = std::min(i1, runs[r].i1);
        if (a < b) run_rows(run_taps[r], src, yT, a, b);
      }
    };
    const bool stream = g.n * O * P * int64_t(sizeof(T)) > kStreamOutputBytes;
    // Too few images for the threads (batch 1): one image at a time, its rows split.
    const int row_threads = nt > 1 ? 1 : threads_for(double(g.n * P) * double(K * O), g.oh);
    if (row_threads > 1) {
      T* xp = ptr<T>(ws) + wt_sz;
      T* yT = xp + xp_sz;
      for (int64_t img = 0; img < g.n; ++img) {
        const T* src = x + img * img_in;
        if (!in_place) {
          pad_planes(src, g, xp);
          src = xp;
        }
        split_threads(row_threads, g.oh, 1,
                      [&](int, int64_t i0, int64_t i1) { rows(src, yT, i0, i1); });
        to_nchw(yT, P, O, ldo, y + img * O * P, relu, stream);
      }
      return;
    }
    dynamic_threads(nt, g.n, 1, [&](int t, int64_t b, int64_t e) {
      T* xp = ptr<T>(ws) + wt_sz + t * wk.per_thread;
      T* yT = xp + xp_sz;  // this image's output, [P][ldo]
      for (int64_t img = b; img < e; ++img) {
        const T* src = x + img * img_in;
        if (!in_place) {
          pad_planes(src, g, xp);
          src = xp;
        }
        rows(src, yT, 0, g.oh);
        to_nchw(yT, P, O, ldo, y + img * O * P, relu, stream);
      }
    });
  }

  // Weight gradient with the transposed tile over the real output pixels, row by row (no
  // padding columns, any horizontal stride of 1 or 2), when O fills channel vectors.
  static bool weight_grad_applies(const Conv2dGeometry& g) { return applies(g) && g.o >= W; }

  // With `relu_out` (a fused ReLU's output), each image's dY is read masked by its sign.
  static void backward_weight(const T* gy, const T* x, const Conv2dGeometry& g, T* dw, T* db,
                              const T* relu_out = nullptr) {
    if (g.sw == 1)
      run_dw<1>(gy, x, g, dw, db, relu_out);
    else
      run_dw<2>(gy, x, g, dw, db, relu_out);
  }

  static TileWork backward_weight_work(const Conv2dGeometry& g) {
    const int64_t K = g.c * g.kh * g.kw, P = g.oh * g.ow, ldo = round_up(g.o, W);
    const int64_t per_img = padded_size(g) + P * ldo;  // a padded image and its dY as [P][ldo]
    TileWork wk;
    wk.nt = threads_for(double(g.n * P) * double(K * g.o), g.n);
    wk.nb = std::clamp<int64_t>(kChunkBytes / (per_img * int64_t(sizeof(T))), 1,
                                std::max<int64_t>(1, g.n / (3 * wk.nt)));
    wk.acc = round_up(K * ldo + g.o, W);  // partial dWᵀ [K][ldo], then db
    wk.per_thread = wk.acc + wk.nb * per_img;
    return wk;
  }

  template <int SW>
  static void run_dw(const T* gy, const T* x, const Conv2dGeometry& g, T* dw, T* db,
                     const T* relu_out) {
    const int64_t K = g.c * g.kh * g.kw, P = g.oh * g.ow, O = g.o;
    const int64_t hp = g.h + 2 * g.ph, wp = g.w + 2 * g.pw, plane = hp * wp;
    const int64_t ldo = round_up(O, W), img_in = g.c * g.h * g.w;
    const bool in_place = g.ph == 0 && g.pw == 0;
    const int64_t xp_sz = padded_size(g);
    const TileWork wk = backward_weight_work(g);
    const int nt = wk.nt;
    // Too few images for the threads (batch 1): the taps k of dWᵀ split instead, each summed
    // over all pixels by one thread, in the same order as on one thread.
    const int tap_threads = nt > 1 ? 1 : threads_for(double(g.n * P) * double(K * O), K / 8);
    const int64_t nb = wk.nb, acc_sz = wk.acc, per_thread = wk.per_thread;
    Tensor ws = Tensor::empty({wk.elems()}, dtype_of<T>());
    // Each thread's masked copy of one image's dY, read from its cache right after.
    Tensor masked = relu_out ? Tensor::empty({nt * O * P}, dtype_of<T>()) : Tensor();
    std::vector<int64_t> koff(K);
    for (int64_t ci = 0, k = 0; ci < g.c; ++ci)
      for (int64_t p = 0; p < g.kh; ++p)
        for (int64_t q = 0; q < g.kw; ++q) koff[k++] = ci * plane + p * g.dh * wp + q * g.dw;
    for (int t = 0; t < nt; ++t)  // zero each thread's partial sums
      std::fill(ptr<T>(ws) + t * per_thread, ptr<T>(ws) + t * per_thread + K * ldo + O, T(0));
    static_grains(nt, g.n, nb, [&](int t, int64_t b, int64_t e) {
      T* pw = ptr<T>(ws) + t * per_thread;  // dWᵀ [K][ldo], then db [O]
      T* pb = pw + K * ldo;
      T* xp = pw + acc_sz;       // the group's padded images, xp_sz apart
      T* dyT = xp + nb * xp_sz;  // the group's dY images as [P][ldo], P·ldo apart
      const int64_t cnt = e - b;
      for (int64_t i = 0; i < cnt; ++i) {
        const T* gyi = gy + (b + i) * O * P;
        if (relu_out) {  // relu's backward: dY where relu_passes(output), else 0
          const T* yi = relu_out + (b + i) * O * P;
          T* m = ptr<T>(masked) + t * O * P;
          for (int64_t q = 0; q < O * P; ++q) m[q] = relu_passes(yi[q]) ? gyi[q] : T(0);
          gyi = m;
        }
        for (int64_t o = 0; o < O; ++o) pb[o] += sum_n(gyi + o * P, P);
        if (!dw) continue;
        from_nchw(gyi, P, O, ldo, dyT + i * P * ldo);
        if (!in_place) pad_planes(x + (b + i) * img_in, g, xp + i * xp_sz);
      }
      if (!dw) return;
      const T* xb = in_place ? x + b * img_in : xp;
      const conv_tiles::PixelRows px{cnt,      g.oh, g.ow, P * ldo, in_place ? img_in : xp_sz,
                                     g.sh * wp};
      split_threads(tap_threads, K, 8, [&](int, int64_t k0, int64_t k1) {
        for (int64_t v0 = 0, ov; v0 < ldo / W; v0 += ov) {
          ov = conv_tiles::tile_vectors(ldo / W, v0);
          conv_tiles::dwt_tiles<T, SW>(int(ov), k1 - k0, dyT + v0 * W, ldo, xb, koff.data() + k0,
                                       px, pw + k0 * ldo + v0 * W);
        }
      });
    });
    const T* base = ptr<T>(ws);
    for (int64_t o = 0; o < O; ++o) {
      if (dw)
        for (int64_t k = 0; k < K; ++k) {
          T sum = 0;
          for (int t = 0; t < nt; ++t) sum += base[t * per_thread + k * ldo + o];
          dw[o * K + k] = sum;
        }
      if (db) {
        T sum = 0;
        for (int t = 0; t < nt; ++t) sum += base[t * per_thread + K * ldo + o];
        db[o] = sum;
      }
    }
  }

  // dyT[p·ldo + o] = gy[o][p], zero for o in [O, ldo): the inverse of to_nchw.
  static void from_nchw(const T* gy, int64_t P, int64_t O, int64_t ldo, T* dyT) {
    using S = Simd<T>;
    typename S::V r[W];
    for (int64_t p0 = 0; p0 < P; p0 += W) {
      const int cnt = int(std::min<int64_t>(W, P - p0));
      for (int64_t o0 = 0; o0 < ldo; o0 += W) {
        for (int q = 0; q < W; ++q)
          r[q] = o0 + q < O ? S::load_n(gy + (o0 + q) * P + p0, cnt) : S::zero();
        conv_tiles::transpose(r);
        for (int q = 0; q < cnt; ++q) S::store(dyT + (p0 + q) * ldo + o0, r[q]);
      }
    }
  }

  // x [C][H][W] into zero-padded planes [C][H + 2ph][W + 2pw].
  static void pad_planes(const T* x, const Conv2dGeometry& g, T* out) {
    const int64_t wp = g.w + 2 * g.pw;
    for (int64_t ci = 0; ci < g.c; ++ci) {
      T* d = out + ci * (g.h + 2 * g.ph) * wp;
      const T* s = x + ci * g.h * g.w;
      std::fill(d, d + g.ph * wp, T(0));
      d += g.ph * wp;
      for (int64_t r = 0; r < g.h; ++r, d += wp, s += g.w) {
        for (int64_t c = 0; c < g.pw; ++c) d[c] = T(0), d[g.pw + g.w + c] = T(0);
        copy_n(s, g.w, d + g.pw);
      }
      std::fill(d, d + g.ph * wp, T(0));
    }
  }

  // y[o][p] = yT[p·ldo + o] for o < O, by lanes × lanes in-register transposes, through relu
  // (relu_value, as Simd::relu) with `relu`. With `stream`, whole aligned vectors go straight to
  // memory (non-temporal stores): an output far larger than the caches would otherwise be read
  // into them first (a read for ownership per line) only to be evicted before the next layer
  // reads it.
  static void to_nchw(const T* yT, int64_t P, int64_t O, int64_t ldo, T* y, bool relu,
                      bool stream) {
    using S = Simd<T>;
    typename S::V r[W];
    for (int64_t p0 = 0; p0 < P; p0 += W) {
      const int cnt = int(std::min<int64_t>(W, P - p0));
      for (int64_t o0 = 0; o0 < O; o0 += W) {
        for (int q = 0; q < W; ++q) r[q] = q < cnt ? S::load(yT + (p0 + q) * ldo + o0) : S::zero();
        conv_tiles::transpose(r);
        if (relu)
          for (int q = 0; q < W; ++q) r[q] = S::relu(r[q]);
        if (stream && cnt == W) {
          for (int q = 0; q < W && o0 + q < O; ++q) {
            T* d = y + (o0 + q) * P + p0;
            if (reinterpret_cast<uintptr_t>(d) % sizeof(typename S::V) == 0)
              S::stream(d, r[q]);
            else
              S::store(d, r[q]);
          }
          continue;
        }
        for (int q = 0; q < W && o0 + q < O; ++q) S::store_n(y + (o0 + q) * P + p0, r[q], cnt);
      }
    }
    if (stream) _mm_sfence();  // the streamed lines are visible before the pass ends
  }
};

}  // namespace freight::cpu::conv_detail
#endif
