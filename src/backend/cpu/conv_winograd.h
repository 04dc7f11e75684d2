// Freight's own Winograd engine of the CPU convolution, F(2x2, 3x3) (Lavin and Gray, "Fast
// Algorithms for Convolutional Neural Networks"), for 3x3 kernels at stride 1 and dilation 1,
// any padding; float32 and float64, on the vector levels of conv_tiles.h. Internal to
// conv_cpu.cpp. The input gradient of such a convolution is again one (conv_tile_engines.h:
// input_grad_as_forward), so it runs here too; the weight gradient stays on the direct tiles.
//
// Each 2x2 block of output pixels ("tile") is computed from the 4x4 input patch d under it:
//   Y = Aᵀ [ Σ_c U_c ⊙ V_c ] A,   U = G g Gᵀ (the 3x3 weights g of (k, c)),   V = Bᵀ d B,
//   Bᵀ = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1],  G = [1 0 0; ½ ½ ½; ½ -½ ½; 0 0 1],
//   Aᵀ = [1 1 1 0; 0 1 -1 -1].
// The sum over c is, for each of the 16 elements ξ of the 4x4 transforms, a GEMM
//   M[ξ][k][tile] = Σ_c U[ξ][k][c] · V[ξ][c][tile],
// 16 multiply-adds per tile and channel pair where the direct sum takes 4·9 = 36: 2.25 times
// fewer. The price is the transforms (about 32 additions per input channel and 24 per output
// channel for each tile, so they pay where channels are many) and rounding: the transforms'
// sums of up to 9 terms before the multiply make the error somewhat larger than a direct sum's.
// Transforms of B and A have coefficients 0 and ±1, of G ±½, all exact in binary.
//
// Work is cut into blocks of whole rows of tiles (a block may span images), sized so that a
// block's V and M stay in the thread's L2; threads take blocks as they come free, and each
// output is computed by one block the same way whichever thread runs it.
#pragma once
#include "backend/cpu/conv_tiles.h"
#if defined(FREIGHT_CONV_TILES)
#include <algorithm>
#include <numeric>

#include "backend/cpu/conv_patches.h"
#include "backend/cpu/conv_tile_engines.h"

namespace freight::cpu::conv_detail {

template <class T>
struct WinogradEngine {
  using S = Simd<T>;
  using V = typename S::V;
  static constexpr int64_t W = S::kLanes, NR = kNV * W;  // tiles per register tile
  static constexpr int kXi = 16;                         // elements of a 4x4 transform

  static bool applies(const Conv2dGeometry& g) {
    return g.kh == 3 && g.kw == 3 && g.sh == 1 && g.sw == 1 && g.dh == 1 && g.dw == 1 && g.oh > 0 &&
           g.ow > 0;
  }

  struct Layout {
    int64_t th, tw;  // tile rows and columns of one image
    int64_t rows;    // tile rows of the batch, n·th
    int64_t rb;      // tile rows per block
    int64_t tbp;     // tiles per block, padded to whole register tiles
    int64_t kp;      // output channels padded to whole register tiles
    int64_t v, m;    // a block's V [16][C][tbp] and M [16][kp][tbp]
    int64_t rowbuf;  // the 4 patch rows and their Bᵀ rows (even, odd columns), 4 output half-rows
  };
  static Layout layout(const Conv2dGeometry& g) {
    Layout l;
    l.th = (g.oh + 1) / 2, l.tw = (g.ow + 1) / 2, l.rows = g.n * l.th;
    l.kp = round_up(g.o, kMR);
    // A block's V and M together within a quarter of the per-thread chunk budget.
    const int64_t per_row = kXi * (g.c + l.kp) * l.tw * int64_t(sizeof(T));
    l.rb = std::max<int64_t>((kChunkBytes / 4) / std::max<int64_t>(per_row, 1), 1);
    // Whole register tiles of tiles where the rows allow (8x8 planes have 4 tiles a row: 6
    // rows fill a 24-tile register tile, where 8 rows would leave half of a second one empty).
    const int64_t whole = NR / std::gcd(l.tw, NR);
    l.rb = std::min(l.rows, std::max(whole, l.rb / whole * whole));
    l.tbp = round_up(l.rb * l.tw, NR);
    l.v = kXi * g.c * l.tbp, l.m = kXi * l.kp * l.tbp;
    l.rowbuf = round_up(16 * (l.tw + 1) + 4 * l.tw, W);
    return l;
  }

  static TileWork forward_work(const Conv2dGeometry& g) {
    const Layout l = layout(g);
    const int64_t blocks = (l.rows + l.rb - 1) / l.rb;
    TileWork wk;
    // Multiply-adds of the transformed products, the work the threads share.
    wk.nt = threads_for(double(kXi) * double(l.rows * l.tw) * double(g.c * g.o), blocks);
    wk.shared = round_up(kXi * l.kp * g.c, W);  // U, packed for the register tile
    wk.per_thread = l.v + l.m + l.rowbuf;
    return wk;
  }

  // U[ξ][kb][c][kMR]: the transformed weights in kMR-row panels of output channels (zeros in
  // the padding rows).
  static void transform_weights(const T* w, const Conv2dGeometry& g, const Layout& l, T* up) {
    std::fill(up, up + kXi * l.kp * g.c, T(0));
    const T h = T(0.5);
    for (int64_t k = 0; k < g.o; ++k)
      for (int64_t c = 0; c < g.c; ++c) {
        const T* f = w + (k * g.c + c) * 9;
        T t[4][3];  // G·g
        for (int q = 0; q < 3; ++q) {
          t[0][q] = f[q];
          t[1][q] = h * (f[q] + f[3 + q] + f[6 + q]);
          t[2][q] = h * (f[q] - f[3 + q] + f[6 + q]);
          t[3][q] = f[6 + q];
        }
        for (int a = 0; a < 4; ++a) {
          const T u[4] = {t[a][0], h * (t[a][0] + t[a][1] + t[a][2]),
                          h * (t[a][0] - t[a][1] + t[a][2]), t[a][2]};
          for (int b = 0; b < 4; ++b)
            up[((int64_t(4 * a + b) * (l.kp / kMR) + k / kMR) * g.c + c) * kMR + k % kMR] = u[b];
        }
      }
  }

  // V[ξ][c][col + j] for the tw tiles of tile row i of one image plane x [h][w] of channel c.
  // Patch row a of tile row i is input row 2i − ph + a; tile j's patch columns 2j − pw + 0..3.
  // eo: per patch row its even then odd columns (tw + 1 each), then the same of Bᵀ·d.
  static void transform_row(const T* x, const Conv2dGeometry& g, const Layout& l, int64_t i, T* eo,
                            T* v, int64_t c, int64_t col) {
    const int64_t n = l.tw + 1;
    for (int a = 0; a < 4; ++a) {
      T* e = eo + 2 * a * n;
      T* o = e + n;
      const int64_t r = 2 * i - g.ph + a;
      if (r < 0 || r >= g.h) {
        std::fill(e, e + 2 * n, T(0));
        continue;
      }
      const T* xr = x + r * g.w;
      auto edge = [&](int64_t j) {
        const int64_t ce = 2 * j - g.pw, co = ce + 1;
        e[j] = ce >= 0 && ce < g.w ? xr[ce] : T(0);
        o[j] = co >= 0 && co < g.w ? xr[co] : T(0);
      };
      // Columns [j0, j1) read inside the row on both halves: a plain strided copy.
      const int64_t j0 = std::min(n, (g.pw + 1) / 2),
                    j1 = std::max(j0, std::min(n, (g.w + g.pw - 1) / 2));
      for (int64_t j = 0; j < j0; ++j) edge(j);
      const T* xs = xr + 2 * j0 - g.pw;
#pragma omp simd
      for (int64_t j = 0; j < j1 - j0; ++j) {
        e[j0 + j] = xs[2 * j];
        o[j0 + j] = xs[2 * j + 1];
      }
      for (int64_t j = j1; j < n; ++j) edge(j);
    }
    // Bᵀ over the patch rows: D_0 = d_0 − d_2, D_1 = d_1 + d_2, D_2 = d_2 − d_1, D_3 = d_1 − d_3,
    // even and odd columns alike (2n values per row, the odd after the even).
    const T *d0 = eo, *d1 = eo + 2 * n, *d2 = eo + 4 * n, *d3 = eo + 6 * n;
    T* dd = eo + 8 * n;
#pragma omp simd
    for (int64_t j = 0; j < 2 * n; ++j) {
      dd[j] = d0[j] - d2[j];
      dd[2 * n + j] = d1[j] + d2[j];
      dd[4 * n + j] = d2[j] - d1[j];
      dd[6 * n + j] = d1[j] - d3[j];
    }
    // Then over the columns of each D_a: tile j's are even j, odd j, even j + 1, odd j + 1.
    const int64_t xs = g.c * l.tbp;  // from one ξ to the next in V
    T* vc = v + c * l.tbp + col;
    for (int a = 0; a < 4; ++a) {
      const T* de = dd + 2 * a * n;
      const T* dO = de + n;
      T* out = vc + 4 * a * xs;
#pragma omp simd
      for (int64_t j = 0; j < l.tw; ++j) {
        out[j] = de[j] - de[j + 1];
        out[xs + j] = dO[j] + de[j + 1];
        out[2 * xs + j] = de[j + 1] - dO[j];
        out[3 * xs + j] = dO[j] - dO[j + 1];
      }
    }
  }

  // M[ξ][k0 .. k0 + kMR)[t0 .. t0 + NR) = Σ_c U[ξ][k][c] · V[ξ][c][t]: kMR broadcast weights
  // against kNV vectors of tiles.
  static void product_tile(const T* up, const T* v, int64_t C, int64_t ldv, T* m, int64_t ldm) {
    V acc[kMR][kNV];
    for (int r = 0; r < kMR; ++r)
      for (int u = 0; u < kNV; ++u) acc[r][u] = S::zero();
    for (int64_t c = 0; c < C; ++c) {
      V b[kNV];
      for (int u = 0; u < kNV; ++u) b[u] = S::load(v + c * ldv + u * W);
      for (int r = 0; r < kMR; ++r) {
        const V a = S::set1(up[c * kMR + r]);
        for (int u = 0; u < kNV; ++u) acc[r][u] = S::fma(a, b[u], acc[r][u]);
      }
    }
    for (int r = 0; r < kMR; ++r)
      for (int u = 0; u < kNV; ++u) S::store(m + r * ldm + u * W, acc[r][u]);
  }

  // Output tile row i of image img from M (tiles col .. col + tw of the block), Aᵀ·M·A per tile,
  // with the bias and the ReLU, cropped to the plane.
  static void output_row(const T* m, const Conv2dGeometry& g, const Layout& l, int64_t img,
                         int64_t i, int64_t col, const T* bias, bool relu, T* tmp, T* y) {
    const int64_t tw = l.tw, xs = l.kp * l.tbp;
    T *y00 = tmp, *y01 = tmp + tw, *y10 = tmp + 2 * tw, *y11 = tmp + 3 * tw;
    const bool second_row = 2 * i + 1 < g.oh;
    for (int64_t k = 0; k < g.o; ++k) {
      const T* mk = m + k * l.tbp + col;
      const T b = bias ? bias[k] : T(0);
#pragma omp simd
      for (int64_t j = 0; j < tw; ++j) {
        T s[4], t[4];  // Aᵀ over the rows of the 4x4 M
        for (int q = 0; q < 4; ++q) {
          const T m0 = mk[q * xs + j], m1 = mk[(4 + q) * xs + j], m2 = mk[(8 + q) * xs + j],
                  m3 = mk[(12 + q) * xs + j];
          s[q] = m0 + m1 + m2;
          t[q] = m1 - m2 - m3;
        }
        y00[j] = s[0] + s[1] + s[2] + b;
        y01[j] = s[1] - s[2] - s[3] + b;
        y10[j] = t[0] + t[1] + t[2] + b;
        y11[j] = t[1] - t[2] - t[3] + b;
      }
      T* yr = y + ((img * g.o + k) * g.oh + 2 * i) * g.ow;
      auto put = [&](T* row, const T* even, const T* odd) {
        const int64_t pairs = g.ow / 2;
        for (int64_t j = 0; j < pairs; ++j) {
          row[2 * j] = relu ? relu_value(even[j]) : even[j];
          row[2 * j + 1] = relu ? relu_value(odd[j]) : odd[j];
        }
        if (g.ow % 2) row[2 * pairs] = relu ? relu_value(even[pairs]) : even[pairs];
      };
      put(yr, y00, y01);
      if (second_row) put(yr + g.ow, y10, y11);
    }
  }

  // y = conv(x, w) + bias (weights [O][C][3][3]).
  static void forward(const T* x, const T* w, const T* bias, const Conv2dGeometry& g, T* y,
                      bool relu = false) {
    const Layout l = layout(g);
    const TileWork wk = forward_work(g);
    Tensor ws = Tensor::empty({wk.elems()}, dtype_of<T>());
    T* up = ptr<T>(ws);
    transform_weights(w, g, l, up);
    const int64_t blocks = (l.rows + l.rb - 1) / l.rb, plane = g.h * g.w;
    dynamic_threads(wk.nt, blocks, 1, [&](int t, int64_t b0, int64_t b1) {
      T* v = up + wk.shared + t * wk.per_thread;
      T* m = v + l.v;
      T* eo = m + l.m;
      T* tmp = eo + 16 * (l.tw + 1);
      for (int64_t b = b0; b < b1; ++b) {
        const int64_t r0 = b * l.rb, r1 = std::min(l.rows, r0 + l.rb);
        const int64_t used = (r1 - r0) * l.tw;
        for (int64_t c = 0; c < g.c; ++c) {
          for (int64_t r = r0; r < r1; ++r) {
            const int64_t img = r / l.th, i = r % l.th;
            transform_row(x + (img * g.c + c) * plane, g, l, i, eo, v, c, (r - r0) * l.tw);
          }
          // The register tiles' overrun past the block's tiles reads zeros.
          for (int xi = 0; xi < kXi; ++xi) {
            T* p = v + (xi * g.c + c) * l.tbp;
            std::fill(p + used, p + round_up(used, NR), T(0));
          }
        }
        const int64_t tiles = round_up(used, NR);
        for (int xi = 0; xi < kXi; ++xi)
          for (int64_t k0 = 0; k0 < l.kp; k0 += kMR)
            for (int64_t t0 = 0; t0 < tiles; t0 += NR)
              product_tile(up + (xi * l.kp + k0) * g.c, v + xi * g.c * l.tbp + t0, g.c, l.tbp,
                           m + (xi * l.kp + k0) * l.tbp + t0, l.tbp);
        for (int64_t r = r0; r < r1; ++r)
          output_row(m, g, l, r / l.th, r % l.th, (r - r0) * l.tw, bias, relu, tmp, y);
      }
    });
  }

  static void backward_input(const T* gy, const T* w, const Conv2dGeometry& g, T* dx) {
    input_grad_as_forward<WinogradEngine>(gy, w, g, dx);
  }
  static int64_t backward_input_elems(const Conv2dGeometry& g) {
    return input_grad_as_forward_elems<WinogradEngine>(g);
  }
};

}  // namespace freight::cpu::conv_detail
#endif  // FREIGHT_CONV_TILES
