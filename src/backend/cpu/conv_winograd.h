// Freight's own Winograd engine of the CPU convolution, F(2x2, 3x3) (Lavin and Gray, "Fast
// Algorithms for Convolutional Neural Networks"), for 3x3 kernels at stride 1 and dilation 1,
// any padding; float32 and float64, on the vector levels of conv_tiles.h. Internal to
// conv_cpu.cpp. The input gradient of such a convolution is again one (conv_tile_engines.h:
// input_grad_as_forward), so it runs here too, and so does the weight gradient (a GEMM per
// element of the transforms that sums over the tiles: see backward_weight).
//
// Each 2x2 block of output pixels ("tile") is computed from the 4x4 input patch d under it:
//   Y = Aᵀ [ Σ_c U_c ⊙ V_c ] A,   U = G g Gᵀ (the 3x3 weights g of (k, c)),   V = Bᵀ d B,
//   Bᵀ = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1],  G = [1 0 0; ½ ½ ½; ½ -½ ½; 0 0 1],
//   Aᵀ = [1 1 1 0; 0 1 -1 -1].
// The sum over c is, for each of the 16 elements ξ of the 4x4 transforms, a GEMM
//   M[ξ][tile][k] = Σ_c V[ξ][tile][c] · U[ξ][c][k],
// 16 multiply-adds per tile and channel pair where the direct sum takes 4·9 = 36: 2.25 times
// fewer. The transforms are additions (coefficients 0 and ±1; G's ±½ is exact in binary), and
// they run on vectors of channels: each image is first copied into a zero-padded channel-blocked
// plane [C / lanes][H'][W'][lanes], so a patch row is 4 consecutive vectors and the input
// transform of a tile is 16 loads, 32 additions and 16 stores for a whole vector of channels;
// the output transform likewise reads vectors of output channels of M, and scatters each lane
// to its NCHW plane. Rounding: a transformed value sums up to 9 products' worth of inputs before
// the multiply, so the error is somewhat above a direct sum's.
//
// Threads take groups of whole images (several small ones, or one large one cut into blocks of
// tiles), each with its own blocked copy, V and M sized for its L2. Every output is computed the
// same way whichever thread runs it and however the tiles are blocked (the sum over c runs in
// order), so results are the same bits on any thread count.
#pragma once
#include "backend/cpu/conv_tiles.h"
#if defined(FREIGHT_CONV_TILES)
#include <algorithm>

#include "backend/cpu/conv_patches.h"
#include "backend/cpu/conv_tile_engines.h"

namespace freight::cpu::conv_detail {

template <class T>
struct WinogradEngine {
  using S = Simd<T>;
  using V = typename S::V;
  static constexpr int64_t W = S::kLanes;
  static constexpr int kNK = 2;  // vectors of output channels per register tile
  static constexpr int kRT = conv_tiles::kAccumulators / kNK;  // tiles per register tile
  static constexpr int64_t KR = kNK * W;                       // output channels per register tile
  static constexpr int kXi = 16;                               // elements of a 4x4 transform
  static constexpr int64_t kLine = 64 / int64_t(sizeof(T));    // elements of a cache line

  static bool applies(const Conv2dGeometry& g) {
    return g.kh == 3 && g.kw == 3 && g.sh == 1 && g.sw == 1 && g.dh == 1 && g.dw == 1 && g.oh > 0 &&
           g.ow > 0;
  }

  struct Layout {
    int64_t th, tw, tiles;  // tile rows, columns and count of one image
    int64_t hp, wp;         // the padded plane of the blocked copy, 2·th + 2 by 2·tw + 2
    int64_t cb, cp, kp;     // channel vectors; channels and output channels padded
    int64_t nb;             // images per group
    int64_t step;           // tiles per block: whole rows of tiles
    int64_t tb;             // room for them in whole register tiles
    int64_t xb;             // one group's blocked copy
    int64_t vs, ms;         // the stride of ξ in V and in M: tb·cp and tb·kp, and a cache line
    int64_t v, m;           // a block's V [16][tb][cp] and M [16][tb][kp]
    int64_t rowbuf;         // one output row of pixel vectors, whole vectors of pixels
    int nt;                 // threads
    int64_t groups;
  };
  static Layout layout(const Conv2dGeometry& g) {
    Layout l;
    l.th = (g.oh + 1) / 2, l.tw = (g.ow + 1) / 2, l.tiles = l.th * l.tw;
    l.hp = 2 * l.th + 2, l.wp = 2 * l.tw + 2;
    l.cb = (g.c + W - 1) / W, l.cp = l.cb * W, l.kp = round_up(g.o, KR);
    const double macs = double(kXi) * double(g.n * l.tiles) * double(g.c * g.o);
    // A block's V and M together within a quarter of the per-thread chunk budget.
    const int64_t per_tile = kXi * (l.cp + l.kp) * int64_t(sizeof(T));
    const int64_t most = std::max<int64_t>(kRT, (kChunkBytes / 4) / per_tile / kRT * kRT);
    if (l.tiles >= most) {  // one image a group, in blocks of about equal size
      l.nb = 1;
      const int64_t blocks = (l.tiles + most - 1) / most;
      l.step = (l.th + blocks - 1) / blocks * l.tw;
    } else {  // several images a group, leaving groups for two rounds of the threads
      const int first = threads_for(macs, g.n);
      l.nb = std::clamp<int64_t>(most / l.tiles, 1, std::max<int64_t>(1, g.n / (2 * first)));
      l.step = l.nb * l.tiles;
    }
    l.tb = round_up(l.step, kRT);
    l.groups = (g.n + l.nb - 1) / l.nb;
    l.nt = threads_for(macs, l.groups);
    l.xb = l.nb * l.cb * l.hp * l.wp * W;
    // Each tile's transform writes 16 vectors a stride of ξ apart, and whole multiples of 4 KiB
    // would put them all in one set of the L1 cache (8 ways): one cache line more apart.
    l.vs = l.tb * l.cp + kLine, l.ms = l.tb * l.kp + kLine;
    l.v = kXi * l.vs, l.m = kXi * l.ms;
    l.rowbuf = round_up(2 * l.tw, W) * W;
    return l;
  }

  static TileWork forward_work(const Conv2dGeometry& g) {
    const Layout l = layout(g);
    TileWork wk;
    wk.nt = l.nt;
    wk.shared = round_up(kXi * l.cp * l.kp, W);  // U
    wk.per_thread = round_up(l.xb + l.v + l.m + 2 * l.rowbuf, W);
    return wk;
  }

  // U[ξ][c][k] = (G g Gᵀ)[ξ] of the weights of (k, c), zeros in the padding.
  static void transform_weights(const T* w, const Conv2dGeometry& g, const Layout& l, T* u) {
    std::fill(u, u + kXi * l.cp * l.kp, T(0));
    // A vector of output channels at a time: their 9 weights of channel c gathered into f (a
    // stride of C·9 apart in w), the transform on whole vectors, and 16 vector stores each
    // contiguous in U (a scalar loop over (k, c) stored 16 values kp apart for every pair).
    const V h = S::set1(T(0.5));
    alignas(64) T f[9][W];
    for (int64_t c = 0; c < g.c; ++c)
      for (int64_t k0 = 0; k0 < g.o; k0 += W) {
        const int64_t lanes = std::min<int64_t>(W, g.o - k0);
        for (int64_t lane = 0; lane < W; ++lane)
          for (int j = 0; j < 9; ++j)
            f[j][lane] = lane < lanes ? w[((k0 + lane) * g.c + c) * 9 + j] : T(0);
        V t[4][3];  // G·g
        for (int q = 0; q < 3; ++q) {
          const V f0 = S::load(f[q]), f1 = S::load(f[3 + q]), f2 = S::load(f[6 + q]);
          t[0][q] = f0;
          t[1][q] = S::mul(h, S::add(S::add(f0, f1), f2));
          t[2][q] = S::mul(h, S::add(S::sub(f0, f1), f2));
          t[3][q] = f2;
        }
        for (int a = 0; a < 4; ++a) {
          const V row[4] = {t[a][0], S::mul(h, S::add(S::add(t[a][0], t[a][1]), t[a][2])),
                            S::mul(h, S::add(S::sub(t[a][0], t[a][1]), t[a][2])), t[a][2]};
          for (int b = 0; b < 4; ++b)
            S::store(u + (int64_t(4 * a + b) * l.cp + c) * l.kp + k0, row[b]);
        }
      }
  }

  // The channel-blocked copy of `count` images of `C` planes h x w from x (NCHW): image i's
  // vector cb of channels at xb + (i·cbn + cb)·hp·wp·W, pixel (r, q) of the padded plane at
  // (r·wp + q)·W, the image at (top, left), zeros elsewhere. A vector of channels by a vector of
  // pixels at a time, through an in-register transpose.
  // With `relu_out` (a fused ReLU's output, laid out as x), x is a gradient passed by the ReLU
  // where relu_passes(relu_out), else 0.
  static void block_planes(const T* x, int64_t C, int64_t h, int64_t w, int64_t top, int64_t left,
                           int64_t cbn, int64_t hp, int64_t wp, int64_t count, T* xb,
                           const T* relu_out = nullptr) {
    const int64_t plane = hp * wp * W;
    std::fill(xb, xb + count * cbn * plane, T(0));
    for (int64_t i = 0; i < count; ++i)
      for (int64_t cb = 0; cb < cbn; ++cb) {
        const int64_t c0 = cb * W, nc = std::min<int64_t>(W, C - c0);
        const T* src = x + (i * C + c0) * h * w;
        T* dst = xb + (i * cbn + cb) * plane + (top * wp + left) * W;
        for (int64_t r = 0; r < h; ++r)
          for (int64_t q = 0; q < w; q += W) {
            const int n = int(std::min<int64_t>(W, w - q));
            const T* at = src + r * w + q;
            V v[W];
            if (nc == W && n == W)
              for (int lane = 0; lane < W; ++lane) v[lane] = S::load(at + lane * h * w);
            else
              for (int lane = 0; lane < W; ++lane)
                v[lane] = lane < nc ? S::load_n(at + lane * h * w, n) : S::zero();
            if (relu_out) {
              const T* y = relu_out + (at - x);
              for (int lane = 0; lane < nc; ++lane)
                v[lane] = S::relu_grad(
                    n == W ? S::load(y + lane * h * w) : S::load_n(y + lane * h * w, n), v[lane]);
            }
            conv_tiles::transpose(v);
            // Stores of a fixed count, or masked ones: GCC turns a loop of plain stores of a
            // variable count into a memcpy from the vectors spilled to the stack.
            T* out = dst + (r * wp + q) * W;
            if (n == W)
#pragma GCC unroll 16
              for (int p = 0; p < W; ++p) S::store(out + p * W, v[p]);
            else
              for (int p = 0; p < n; ++p) S::store_n(out + p * W, v[p], W);
          }
      }
  }
  // The input images, at the padding's offset in planes of 2·th + 2 by 2·tw + 2.
  static void block_images(const T* x, const Conv2dGeometry& g, const Layout& l, int64_t count,
                           T* xb) {
    block_planes(x, g.c, g.h, g.w, g.ph, g.pw, l.cb, l.hp, l.wp, count, xb);
  }

  // V[ξ][t][cb·W ..] = Bᵀ d B of the patch at p (row stride rs), a vector of channels.
  static void transform_input(const T* p, int64_t rs, T* v, int64_t xs) {
    V d[4][4];
    for (int a = 0; a < 4; ++a)
      for (int b = 0; b < 4; ++b) d[a][b] = S::load(p + a * rs + b * W);
    for (int b = 0; b < 4; ++b) {  // Bᵀ over the patch rows
      const V r0 = S::sub(d[0][b], d[2][b]), r1 = S::add(d[1][b], d[2][b]),
              r2 = S::sub(d[2][b], d[1][b]), r3 = S::sub(d[1][b], d[3][b]);
      d[0][b] = r0, d[1][b] = r1, d[2][b] = r2, d[3][b] = r3;
    }
    for (int a = 0; a < 4; ++a) {  // then over the columns
      T* out = v + 4 * a * xs;
      S::store(out, S::sub(d[a][0], d[a][2]));
      S::store(out + xs, S::add(d[a][1], d[a][2]));
      S::store(out + 2 * xs, S::sub(d[a][2], d[a][1]));
      S::store(out + 3 * xs, S::sub(d[a][1], d[a][3]));
    }
  }

  // The register tile of both products: acc[r][q] = (accumulate ? m[r·ldm + q·W] : 0) +
  // Σ_s a[r·ar + s·as] · b[s·bs + q·W] for r < kRT, q < kNK (kRT broadcasts against kNK vectors),
  // the sum over s in registers. The forward sums over channels (a: V's rows of tiles, b: U's rows
  // of output channels), the weight gradient over tiles (a: V's columns of channels, b: Ŷ's rows).
  static void register_tile(const T* a, int64_t ar, int64_t as, const T* b, int64_t bs,
                            int64_t steps, bool accumulate, T* m, int64_t ldm) {
    V acc[kRT][kNK];
    for (int r = 0; r < kRT; ++r)
      for (int q = 0; q < kNK; ++q)
        acc[r][q] = accumulate ? S::load(m + r * ldm + q * W) : S::zero();
    for (int64_t s = 0; s < steps; ++s) {
      V bv[kNK];
      for (int q = 0; q < kNK; ++q) bv[q] = S::load(b + s * bs + q * W);
      for (int r = 0; r < kRT; ++r) {
        const V av = S::set1(a[r * ar + s * as]);
        for (int q = 0; q < kNK; ++q) acc[r][q] = S::fma(av, bv[q], acc[r][q]);
      }
    }
    for (int r = 0; r < kRT; ++r)
      for (int q = 0; q < kNK; ++q) S::store(m + r * ldm + q * W, acc[r][q]);
  }

  // Aᵀ M A of one tile for a vector of output channels, with the bias and the ReLU: its four
  // outputs, (0, 0) and (0, 1) at row0[0] and row0[W], (1, 0) and (1, 1) at row1[0], row1[W].
  static void transform_output(const T* m, int64_t xs, V bias, bool relu, T* row0, T* row1) {
    V s[4], t[4];
    for (int b = 0; b < 4; ++b) {  // Aᵀ over the rows of M
      const V m0 = S::load(m + b * xs), m1 = S::load(m + (4 + b) * xs),
              m2 = S::load(m + (8 + b) * xs), m3 = S::load(m + (12 + b) * xs);
      s[b] = S::add(S::add(m0, m1), m2);
      t[b] = S::sub(S::sub(m1, m2), m3);
    }
    V out[4] = {S::add(S::add(S::add(s[0], s[1]), s[2]), bias),
                S::add(S::sub(S::sub(s[1], s[2]), s[3]), bias),
                S::add(S::add(S::add(t[0], t[1]), t[2]), bias),
                S::add(S::sub(S::sub(t[1], t[2]), t[3]), bias)};
    if (relu)
      for (V& o : out) o = S::relu(o);
    S::store(row0, out[0]);
    S::store(row0 + W, out[1]);
    S::store(row1, out[2]);
    S::store(row1 + W, out[3]);
  }

  // Output row `orow` of `lanes` channels from k0 into y (channel k0's plane), from the row
  // buffer of pixel vectors rb[px][W]: a vector of pixels by a vector of channels at a time,
  // through an in-register transpose.
  static void store_row(const T* rb, const Conv2dGeometry& g, int64_t orow, int lanes, T* y) {
    const int64_t P = g.oh * g.ow;
    for (int64_t px = 0; px < g.ow; px += W) {
      const int n = int(std::min<int64_t>(W, g.ow - px));
      V v[W];
      for (int p = 0; p < W; ++p) v[p] = S::load(rb + (px + p) * W);
      conv_tiles::transpose(v);
      T* dst = y + orow * g.ow + px;
      for (int lane = 0; lane < lanes; ++lane)
        if (n == W)
          S::store(dst + lane * P, v[lane]);
        else
          S::store_n(dst + lane * P, v[lane], n);
    }
  }

  // y = conv(x, w) + bias (weights [O][C][3][3]).
  static void forward(const T* x, const T* w, const T* bias, const Conv2dGeometry& g, T* y,
                      bool relu = false) {
    const Layout l = layout(g);
    const TileWork wk = forward_work(g);
    Tensor ws = Tensor::empty({wk.elems()}, dtype_of<T>());
    T* u = ptr<T>(ws);
    transform_weights(w, g, l, u);
    const int64_t P = g.oh * g.ow, rs = l.wp * W, plane = l.hp * rs;
    dynamic_threads(l.nt, l.groups, 1, [&](int t, int64_t g0, int64_t g1) {
      T* xb = u + wk.shared + t * wk.per_thread;
      T* v = xb + l.xb;
      T* m = v + l.v;
      T* rows = m + l.m;
      for (int64_t grp = g0; grp < g1; ++grp) {
        const int64_t img0 = grp * l.nb, count = std::min(l.nb, g.n - img0);
        block_images(x + img0 * g.c * g.h * g.w, g, l, count, xb);
        const int64_t tiles = count * l.tiles;
        for (int64_t t0 = 0; t0 < tiles; t0 += l.step) {
          const int64_t used = std::min(l.step, tiles - t0), padded = round_up(used, kRT);
          // Inputs, a vector of channels at a time; the register tiles' overrun reads zeros.
          for (int64_t q = 0; q < used; ++q) {
            const int64_t tt = t0 + q, i = tt / l.tiles, r = tt % l.tiles / l.tw, c = tt % l.tw;
            const T* p = xb + i * l.cb * plane + 2 * r * rs + 2 * c * W;
            for (int64_t cb = 0; cb < l.cb; ++cb)
              transform_input(p + cb * plane, rs, v + q * l.cp + cb * W, l.vs);
          }
          for (int xi = 0; xi < kXi; ++xi)
            std::fill(v + xi * l.vs + used * l.cp, v + xi * l.vs + padded * l.cp, T(0));
          for (int xi = 0; xi < kXi; ++xi)
            for (int64_t k0 = 0; k0 < l.kp; k0 += KR)
              for (int64_t q = 0; q < padded; q += kRT)
                // M[ξ][q .. q + kRT)[k0 .. k0 + KR) = Σ_c V[ξ][t][c] · U[ξ][c][k]
                register_tile(v + xi * l.vs + q * l.cp, l.cp, 1, u + xi * l.cp * l.kp + k0, l.kp,
                              g.c, false, m + xi * l.ms + q * l.kp + k0, l.kp);
          // Outputs, a row of tiles and a vector of output channels at a time (blocks hold
          // whole rows of tiles).
          for (int64_t q0 = 0; q0 < used; q0 += l.tw) {
            const int64_t tt = t0 + q0, i = img0 + tt / l.tiles, r = tt % l.tiles / l.tw;
            for (int64_t k0 = 0; k0 < g.o; k0 += W) {
              const int lanes = int(std::min<int64_t>(W, g.o - k0));
              const V b = bias ? S::load_n(bias + k0, lanes) : S::zero();
              for (int64_t c = 0; c < l.tw; ++c)
                transform_output(m + (q0 + c) * l.kp + k0, l.ms, b, relu, rows + 2 * c * W,
                                 rows + l.rowbuf + 2 * c * W);
              T* yk = y + (i * g.o + k0) * P;
              store_row(rows, g, 2 * r, lanes, yk);
              if (2 * r + 1 < g.oh) store_row(rows + l.rowbuf, g, 2 * r + 1, lanes, yk);
            }
          }
        }
      }
    });
  }

  // ---------------------------------------------------------------- weight gradient
  // With M = Σ_c U_c ⊙ V_c and Y = Aᵀ M A, the gradient reaching M is Ŷ = A dY Aᵀ, that reaching
  // U is Σ_tiles Ŷ ⊙ V, and since U = G g Gᵀ is linear in g,
  //   dW[k][c] = Gᵀ [ Σ_tiles Ŷ_k ⊙ V_c ] G,
  // again 16 products per tile and channel pair where the direct sum takes 36, now a GEMM per ξ
  // whose sum runs over the tiles: D[ξ][c][k] = Σ_t V[ξ][t][c] · Ŷ[ξ][t][k]. The tiles beyond an
  // odd plane's edge have dY = 0 there, and add nothing. dY is blocked like the input (its planes
  // of 2·th by 2·tw, no offset), so Ŷ is computed a vector of output channels at a time.
  // Each thread sums D over a fixed run of images (static_grains) into its own partial, and the
  // partials are added in thread order: the same bits from run to run on a thread count.
  struct GradWork {
    int64_t kb;   // vectors of output channels
    int64_t cr;   // D's rows: channels padded to whole register tiles
    int64_t acc;  // a thread's partial D [16][cr][kp], then db [kp]
    int64_t yb;   // one group's blocked dY
    int64_t per_thread;
    int nt;
  };
  static GradWork grad_work(const Conv2dGeometry& g, const Layout& l) {
    GradWork gw;
    gw.kb = (g.o + W - 1) / W;
    gw.cr = round_up(l.cp, int64_t(kRT));
    gw.acc = round_up(kXi * gw.cr * l.kp + l.kp, W);
    gw.yb = l.nb * gw.kb * (2 * l.th) * (2 * l.tw) * W;
    // V's last register tile of rows reads up to kRT − 1 channels past the last tile's: slack.
    gw.per_thread = round_up(gw.acc + l.xb + gw.yb + l.v + round_up(int64_t(kRT), W) + l.m, W);
    gw.nt = l.nt;
    return gw;
  }
  static TileWork backward_weight_work(const Conv2dGeometry& g) {
    const GradWork gw = grad_work(g, layout(g));
    TileWork wk;
    wk.nt = gw.nt;
    wk.acc = gw.acc;
    wk.per_thread = gw.per_thread;
    return wk;
  }

  // Ŷ = A dY Aᵀ of one tile's 2x2 gradients (a vector of output channels each, at p, p + W, p +
  // rs, p + rs + W), A = [1 0; 1 1; 1 -1; 0 -1]: element ξ = 4a + b at yh + ξ·xs.
  static void transform_grad(const T* p, int64_t rs, T* yh, int64_t xs) {
    const V a = S::load(p), b = S::load(p + W), c = S::load(p + rs), d = S::load(p + rs + W);
    const V z = S::zero();
    const V rows[4][2] = {{a, b},
                          {S::add(a, c), S::add(b, d)},
                          {S::sub(a, c), S::sub(b, d)},
                          {S::sub(z, c), S::sub(z, d)}};
    for (int r = 0; r < 4; ++r) {
      T* out = yh + 4 * r * xs;
      S::store(out, rows[r][0]);
      S::store(out + xs, S::add(rows[r][0], rows[r][1]));
      S::store(out + 2 * xs, S::sub(rows[r][0], rows[r][1]));
      S::store(out + 3 * xs, S::sub(z, rows[r][1]));
    }
  }

  // dW = Gᵀ D G for every (k, c), from D [16][cr][kp]; Gᵀ = [1 ½ ½ 0; 0 ½ -½ 0; 0 ½ ½ 1].
  static void transform_weight_grad(const T* d, const Conv2dGeometry& g, const Layout& l,
                                    int64_t cr, T* dw) {
    const T h = T(0.5);
    for (int64_t k = 0; k < g.o; ++k)
      for (int64_t c = 0; c < g.c; ++c) {
        T x[4][4];
        for (int xi = 0; xi < kXi; ++xi) x[xi / 4][xi % 4] = d[(xi * cr + c) * l.kp + k];
        T t[3][4];  // Gᵀ·D
        for (int b = 0; b < 4; ++b) {
          t[0][b] = x[0][b] + h * (x[1][b] + x[2][b]);
          t[1][b] = h * (x[1][b] - x[2][b]);
          t[2][b] = h * (x[1][b] + x[2][b]) + x[3][b];
        }
        T* f = dw + (k * g.c + c) * 9;
        for (int a = 0; a < 3; ++a) {
          f[3 * a] = t[a][0] + h * (t[a][1] + t[a][2]);
          f[3 * a + 1] = h * (t[a][1] - t[a][2]);
          f[3 * a + 2] = h * (t[a][1] + t[a][2]) + t[a][3];
        }
      }
  }

  // dW (weights [O][C][3][3]) and db from dY and x; either may be null. With `relu_out` (a fused
  // ReLU's output; only with dW), dY is read masked by it as it is blocked.
  static void backward_weight(const T* gy, const T* x, const Conv2dGeometry& g, T* dw, T* db,
                              const T* relu_out = nullptr) {
    const Layout l = layout(g);
    const GradWork gw = grad_work(g, l);
    const int nt = gw.nt;
    const int64_t P = g.oh * g.ow, rs = l.wp * W, plane = l.hp * rs;
    const int64_t yrs = 2 * l.tw * W, yplane = 2 * l.th * yrs;
    const int64_t dsz = kXi * gw.cr * l.kp;
    Tensor ws = Tensor::empty({nt * gw.per_thread}, dtype_of<T>());
    for (int t = 0; t < nt; ++t)  // zero each thread's partial D and db
      std::fill(ptr<T>(ws) + t * gw.per_thread, ptr<T>(ws) + t * gw.per_thread + dsz + l.kp, T(0));
    static_grains(nt, g.n, l.nb, [&](int t, int64_t img0, int64_t img1) {
      T* d = ptr<T>(ws) + t * gw.per_thread;
      T* pb = d + dsz;
      T* xb = d + gw.acc;
      T* yb = xb + l.xb;
      T* v = yb + gw.yb;
      T* yh = v + l.v + round_up(int64_t(kRT), W);
      const int64_t count = img1 - img0;
      if (!dw) {  // (relu_out is null then: the caller masks dY for db alone)
        for (int64_t i = 0; i < count; ++i)
          for (int64_t k = 0; k < g.o; ++k) pb[k] += sum_n(gy + ((img0 + i) * g.o + k) * P, P);
        return;
      }
      std::fill(v + l.v, v + l.v + round_up(int64_t(kRT), W), T(0));
      if (gw.kb * W < l.kp) std::fill(yh, yh + l.m, T(0));  // output channels of no vector
      block_images(x + img0 * g.c * g.h * g.w, g, l, count, xb);
      block_planes(gy + img0 * g.o * P, g.o, g.oh, g.ow, 0, 0, gw.kb, 2 * l.th, 2 * l.tw, count, yb,
                   relu_out ? relu_out + img0 * g.o * P : nullptr);
      // db from the blocked dY (zeros around each plane), a vector of output channels at a time.
      for (int64_t i = 0; i < count; ++i)
        for (int64_t kb = 0; kb < gw.kb; ++kb) {
          const T* py = yb + (i * gw.kb + kb) * yplane;
          V acc[4] = {S::zero(), S::zero(), S::zero(), S::zero()};
          for (int64_t j = 0; j < yplane; j += 4 * W)  // yplane: whole 2x2 blocks of vectors
            for (int a = 0; a < 4; ++a) acc[a] = S::add(acc[a], S::load(py + j + a * W));
          T* at = pb + kb * W;
          S::store(at, S::add(S::load(at), S::add(S::add(acc[0], acc[1]), S::add(acc[2], acc[3]))));
        }
      const int64_t tiles = count * l.tiles;
      for (int64_t t0 = 0; t0 < tiles; t0 += l.step) {
        const int64_t used = std::min(l.step, tiles - t0);
        for (int64_t q = 0; q < used; ++q) {
          const int64_t tt = t0 + q, i = tt / l.tiles, r = tt % l.tiles / l.tw, c = tt % l.tw;
          const T* p = xb + i * l.cb * plane + 2 * r * rs + 2 * c * W;
          for (int64_t cb = 0; cb < l.cb; ++cb)
            transform_input(p + cb * plane, rs, v + q * l.cp + cb * W, l.vs);
          const T* py = yb + i * gw.kb * yplane + 2 * r * yrs + 2 * c * W;
          for (int64_t kb = 0; kb < gw.kb; ++kb)
            transform_grad(py + kb * yplane, yrs, yh + q * l.kp + kb * W, l.ms);
        }
        for (int xi = 0; xi < kXi; ++xi)
          for (int64_t c0 = 0; c0 < l.cp; c0 += kRT)
            for (int64_t k0 = 0; k0 < l.kp; k0 += KR)
              // D[ξ][c0 .. c0 + kRT)[k0 .. k0 + KR) += Σ_t V[ξ][t][c] · Ŷ[ξ][t][k]
              register_tile(v + xi * l.vs + c0, 1, l.cp, yh + xi * l.ms + k0, l.kp, used, true,
                            d + (xi * gw.cr + c0) * l.kp + k0, l.kp);
      }
    });
    // The threads' partials, added in thread order into the first.
    T* d0 = ptr<T>(ws);
    for (int t = 1; t < nt; ++t) {
      const T* dt = d0 + t * gw.per_thread;
      for (int64_t j = 0; j < dsz + l.kp; ++j) d0[j] += dt[j];
    }
    if (dw) transform_weight_grad(d0, g, l, gw.cr, dw);
    if (db) std::copy(d0 + dsz, d0 + dsz + g.o, db);
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
