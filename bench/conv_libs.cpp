// Every convolution of the zoo's CNNs, pass by pass, in Freight's engines and in the CPU
// convolution libraries a framework could call instead (oneDNN, the library PyTorch's CPU
// convolutions run on, and libxsmm), timed in one run on this machine: which library is fastest
// on each exact shape, and how close each comes to the machine's float32 GEMM peak. Beside them,
// the GEMM ceiling of an im2col engine on OpenBLAS and on BLIS.
//
//   freight_conv_libs [--batch-sizes 64,256] [--shapes NAME,...] [--markdown FILE]
//                     [--break-check LIBRARY]
//
// Columns, each the median of repeated calls after a warm-up, all threads:
//   freight      the engine Freight picks (conv_cpu.cpp's rule), the path training runs;
//   im2col+BLAS  Freight's portable engine: unrolled patches and one OpenBLAS sgemm per chunk;
//   dnnl nchw    oneDNN on the plain NCHW tensors Freight keeps (any reordering oneDNN needs is
//                inside the call, as it would be if Freight called it);
//   dnnl best    oneDNN on the layouts it prefers (channel-blocked), reorders not counted: the
//                ceiling a framework that keeps oneDNN's layouts between layers can reach;
//   xsmm blocked libxsmm's direct convolution (LIBXSMM_DNN_CONV_ALGO_DIRECT) on its own
//                channel-blocked layout, reorders not counted (like dnnl best);
//   xsmm nhwc    the same on NHWC activations and RSCK filters;
//   GEMM only    not a convolution: the GEMMs an im2col engine runs for the pass, per image
//                (forward W[O, CKK]·cols[CKK, OH·OW]; input gradient Wᵀ·dY, col2im not
//                counted; weight gradient dY·colsᵀ summed over the images), threads taking
//                whole images with one single-threaded GEMM each; the lowering is not
//                counted, so this bounds from above any im2col engine that lowers image by
//                image on that BLAS. (Freight's im2col+BLAS engine differs: its GEMMs take
//                L2-sized runs of pixels that may span images.) With OpenBLAS (what Freight
//                links) and BLIS (dlopen'ed, blis_dl.h: never linked beside OpenBLAS).
// "best" and "freight / best" are over the complete convolutions, not the GEMM-only columns.
// A library that refuses a shape (or is not built or installed) gets "-[n]", note n saying why.
// GFLOP/s count 2 per multiply-add of the pass (forward, input gradient and weight gradient all
// have the forward's count); "% peak" is against the GEMM peak measured by `freight devices
// --measure` (the cached figure for this build, or a fresh measurement).
//
// Before any library's pass is timed its result is checked against Freight's kernels on the
// same operands (the timed batch for oneDNN and libxsmm; for the GEMM columns an im2col/col2im
// lowering at a batch of two images per thread, and OpenBLAS against BLIS on the timed
// operands): max |difference| / max |Freight| above 1e-4 stops the program with status 1, as a
// benchmark of a wrong kernel is worthless. --break-check LIBRARY (dnnl-nchw, dnnl-best,
// xsmm-blocked, xsmm-nhwc, openblas, blis) adds 1 to one weight that library is given, to see
// the check fail.
#include <cblas.h>
#include <fmt/format.h>
#include <omp.h>
#include <dnnl.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cpu/conv_cpu.h"
#include "blis_dl.h"
#include "freight/freight.h"
#include "freight/peaks.h"
#include "ops/kernels/conv.h"
#if FREIGHT_HAVE_LIBXSMM
#include "xsmm_conv.h"
#endif

using namespace freight;

namespace {

struct ConvShape {
  const char* name;  // model and layer
  int64_t c, h, w, o, k, s, p;
};

// The convolutions of mnist-cnn, lenet5, alexnet-cifar and resnet56-cifar (models/*.json), each
// distinct geometry once.
const std::vector<ConvShape> kShapes = {
    {"mnist-cnn.c1", 1, 28, 28, 32, 3, 1, 0},      {"mnist-cnn.c2", 32, 26, 26, 64, 3, 1, 0},
    {"lenet5.c1", 1, 28, 28, 6, 5, 1, 2},          {"lenet5.c2", 6, 14, 14, 16, 5, 1, 0},
    {"alexnet-cifar.c1", 3, 32, 32, 32, 5, 1, 2},  {"alexnet-cifar.c2", 32, 16, 16, 32, 5, 1, 2},
    {"alexnet-cifar.c3", 32, 8, 8, 64, 5, 1, 2},   {"resnet56.stem", 3, 32, 32, 16, 3, 1, 1},
    {"resnet56.16", 16, 32, 32, 16, 3, 1, 1},      {"resnet56.16to32", 16, 32, 32, 32, 3, 2, 1},
    {"resnet56.32", 32, 16, 16, 32, 3, 1, 1},      {"resnet56.32to64", 32, 16, 16, 64, 3, 2, 1},
    {"resnet56.64", 64, 8, 8, 64, 3, 1, 1},        {"resnet56.short32", 16, 32, 32, 32, 1, 2, 0},
    {"resnet56.short64", 32, 16, 16, 64, 1, 2, 0},
};

const char* kPassNames[3] = {"forward", "input grad", "weight grad"};

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Median seconds per call: a warm-up call, then 7 rounds of enough calls for about 50 ms.
double median_seconds(const std::function<void()>& fn) {
  fn();
  double t0 = now();
  fn();
  const double once = std::max(1e-6, now() - t0);
  const int reps = int(std::clamp(0.05 / once, 1.0, 1000.0));
  std::vector<double> t;
  for (int r = 0; r < 7; ++r) {
    double a = now();
    for (int i = 0; i < reps; ++i) fn();
    t.push_back((now() - a) / reps);
  }
  std::sort(t.begin(), t.end());
  return t[3];
}

Conv2dGeometry geometry(const ConvShape& s, int64_t n) {
  Conv2dGeometry g{};
  g.n = n, g.c = s.c, g.h = s.h, g.w = s.w, g.o = s.o, g.kh = s.k, g.kw = s.k;
  g.sh = g.sw = s.s, g.ph = g.pw = s.p, g.dh = g.dw = 1;
  g.oh = (s.h + 2 * s.p - s.k) / s.s + 1;
  g.ow = (s.w + 2 * s.p - s.k) / s.s + 1;
  return g;
}

struct Timed {
  std::vector<double> seconds;       // per pass
  std::vector<std::string> engines;  // the engine that ran each pass
};

// The engine whose run counter for `pass` moved since `before`.
std::string engine_that_ran(int pass, const std::vector<int64_t>& before) {
  const char* names[] = {"auto",   "im2col+BLAS", "panel",    "implicit",
                         "direct", "onednn",      "winograd", "winograd F2"};
  for (int e = 1; e <= 7; ++e)
    if (cpu::conv_engine_runs(pass, cpu::ConvEngine(e)) > before[size_t(e)]) return names[e];
  return "?";
}

// Seconds of each pass in Freight with `engine` (Auto: its own choice; `own`: among Freight's
// own engines only, oneDNN left out).
Timed freight_passes(const Conv2dGeometry& g, cpu::ConvEngine engine, bool own = false) {
  Generator gen(1);
  Tensor x = Tensor::normal({g.n, g.c, g.h, g.w}, 0, 1, DType::F32, Device::cpu(), &gen);
  Tensor w = Tensor::normal({g.o, g.c, g.kh, g.kw}, 0, 0.1, DType::F32, Device::cpu(), &gen);
  Tensor b = Tensor::normal({g.o}, 0, 1, DType::F32, Device::cpu(), &gen);
  Tensor gy = Tensor::normal({g.n, g.o, g.oh, g.ow}, 0, 1, DType::F32, Device::cpu(), &gen);
  Tensor y = Tensor::empty({g.n, g.o, g.oh, g.ow});
  Tensor gx = Tensor::empty({g.n, g.c, g.h, g.w});
  Tensor gw = Tensor::empty({g.o, g.c, g.kh, g.kw}), gb = Tensor::empty({g.o});
  const std::function<void()> passes[3] = {
      [&] { kernels::conv2d_forward(DeviceType::CPU, x, w, b, g, false, y); },
      [&] { kernels::conv2d_backward_input(DeviceType::CPU, gy, w, g, gx); },
      [&] { kernels::conv2d_backward_weight(DeviceType::CPU, gy, x, g, Tensor(), gw, gb); }};
  cpu::set_conv_engine(engine);
  const bool allowed = cpu::conv_dnnl_allowed();
  if (own) cpu::set_conv_dnnl_allowed(false);
  Timed t;
  for (int pass = 0; pass < 3; ++pass) {
    std::vector<int64_t> before(8);
    for (int e = 0; e < 8; ++e) before[size_t(e)] = cpu::conv_engine_runs(pass, cpu::ConvEngine(e));
    t.seconds.push_back(median_seconds(passes[pass]));
    t.engines.push_back(engine_that_ran(pass, before));
  }
  cpu::set_conv_engine(cpu::ConvEngine::Auto);
  cpu::set_conv_dnnl_allowed(allowed);
  return t;
}

// ================================================================ correctness

constexpr double kTolerance = 1e-4;

// max |got − want| / max |want|: the error relative to the result's scale (element by element
// it would blow up where sums cancel to near zero). Infinite where a result is not finite, or
// where the reference is all zeros (it would check nothing).
double relative_error(const float* got, const std::vector<float>& want) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i])) return HUGE_VAL;
    diff = std::max(diff, std::fabs(double(got[i]) - double(want[i])));
    scale = std::max(scale, std::fabs(double(want[i])));
  }
  return scale > 0 ? diff / scale : HUGE_VAL;
}

// Every check of the run: the worst error per library, and a loud stop at the first failure.
class Checks {
 public:
  explicit Checks(std::string broken) : broken_(std::move(broken)) {}

  // Whether `library` ("dnnl nchw", "openblas", ...) is to be handed a broken weight.
  bool broken(const std::string& library) const { return library == broken_; }

  // Returns the error when it is within the tolerance; else says so and ends the program.
  double expect(const std::string& library, const std::string& where, const char* pass,
                const float* got, const std::vector<float>& want) {
    const double err = relative_error(got, want);
    double& worst = worst_[library];
    worst = std::max(worst, err);
    if (err <= kTolerance) return err;  // (false for NaN too)
    std::fprintf(stderr,
                 "freight_conv_libs: CHECK FAILED: %s, %s, %s: max |diff| / max |reference| = "
                 "%.3g (tolerance %.0e). A benchmark of a wrong kernel is worthless: stopping.\n",
                 library.c_str(), where.c_str(), pass, err, kTolerance);
    std::exit(1);
  }

  // "dnnl nchw 3.1e-07, ...": each checked library's worst error, in the table's order.
  std::string summary() const {
    std::string out;
    for (const std::string& name : order())
      out += fmt::format("{}{} {:.1e}", out.empty() ? "" : ", ", name, worst_.at(name));
    return out.empty() ? "none" : out;
  }

 private:
  std::vector<std::string> order() const {
    std::vector<std::string> names;
    for (const char* n : {"dnnl nchw", "dnnl best", "xsmm blocked", "xsmm nhwc", "openblas", "blis",
                          "openblas vs blis"})
      if (worst_.count(n)) names.push_back(n);
    return names;
  }
  std::string broken_;
  std::map<std::string, double> worst_;
};

// Plain operands of one geometry (x NCHW, w OIHW, gy NCHW; uniform in [-1, 1)) and Freight's
// results on them (its own engine choice): what every library is checked against.
struct Reference {
  std::vector<float> x, w, gy;   // inputs
  std::vector<float> y, gx, gw;  // forward (no bias), input gradient, weight gradient
};

Reference reference(const Conv2dGeometry& g) {
  Reference r;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1, 1);
  auto random = [&](int64_t count) {
    std::vector<float> v(static_cast<size_t>(count));
    for (float& e : v) e = u(rng);
    return v;
  };
  r.x = random(g.n * g.c * g.h * g.w);
  r.w = random(g.o * g.c * g.kh * g.kw);
  r.gy = random(g.n * g.o * g.oh * g.ow);
  const Tensor x = Tensor::from_vector(r.x, {g.n, g.c, g.h, g.w}),
               w = Tensor::from_vector(r.w, {g.o, g.c, g.kh, g.kw}),
               gy = Tensor::from_vector(r.gy, {g.n, g.o, g.oh, g.ow});
  Tensor y = Tensor::empty({g.n, g.o, g.oh, g.ow}), gx = Tensor::empty({g.n, g.c, g.h, g.w}),
         gw = Tensor::empty({g.o, g.c, g.kh, g.kw}), no_bias;
  kernels::conv2d_forward(DeviceType::CPU, x, w, Tensor(), g, false, y);
  kernels::conv2d_backward_input(DeviceType::CPU, gy, w, g, gx);
  kernels::conv2d_backward_weight(DeviceType::CPU, gy, x, g, Tensor(), gw, no_bias);
  auto values = [](const Tensor& t) {
    return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
  };
  r.y = values(y), r.gx = values(gx), r.gw = values(gw);
  return r;
}

// ================================================================ result cells

// One cell of the table: GFLOP/s, or a dash and the number of the note that says why not.
struct Cell {
  double rate = 0;
  int note = 0;
};

class Notes {
 public:
  int add(const std::string& text) {
    auto it = std::find(texts_.begin(), texts_.end(), text);
    if (it != texts_.end()) return int(it - texts_.begin()) + 1;
    texts_.push_back(text);
    return int(texts_.size());
  }
  const std::vector<std::string>& texts() const { return texts_; }

 private:
  std::vector<std::string> texts_;
};

std::string show(const Cell& c) {
  return c.note ? fmt::format("-[{}]", c.note) : fmt::format("{:.1f}", c.rate);
}

std::vector<Cell> unavailable(Notes& notes, const std::string& why) {
  const int note = notes.add(why);
  return std::vector<Cell>(3, Cell{0, note});
}

// ================================================================ oneDNN

// Seconds of each pass in oneDNN, on plain NCHW tensors or on the layouts it picks, after
// checking each pass's result against Freight's on the same operands.
std::vector<double> dnnl_passes(const Conv2dGeometry& g, bool plain, const Reference& ref,
                                Checks& checks, const std::string& where) {
  using namespace dnnl;
  using tag = memory::format_tag;
  using dt = memory::data_type;
  engine eng(engine::kind::cpu, 0);
  stream st(eng);
  const tag act = plain ? tag::nchw : tag::any, wt = plain ? tag::oihw : tag::any;
  const memory::dims x_dims = {g.n, g.c, g.h, g.w}, w_dims = {g.o, g.c, g.kh, g.kw},
                     y_dims = {g.n, g.o, g.oh, g.ow};
  memory::desc src(x_dims, dt::f32, act), wei(w_dims, dt::f32, wt), bia({g.o}, dt::f32, tag::x),
      dst(y_dims, dt::f32, act);
  const memory::dims strides = {g.sh, g.sw}, pad = {g.ph, g.pw};
  auto fwd_pd = convolution_forward::primitive_desc(
      convolution_forward::desc(prop_kind::forward_training, algorithm::convolution_direct, src,
                                wei, bia, dst, strides, pad, pad),
      eng);
  auto bwd_data_pd = convolution_backward_data::primitive_desc(
      convolution_backward_data::desc(algorithm::convolution_direct, src, wei, dst, strides, pad,
                                      pad),
      eng, fwd_pd);
  auto bwd_w_pd = convolution_backward_weights::primitive_desc(
      convolution_backward_weights::desc(algorithm::convolution_direct, src, wei, bia, dst, strides,
                                         pad, pad),
      eng, fwd_pd);
  memory x(fwd_pd.src_desc(), eng), w(fwd_pd.weights_desc(), eng), b(fwd_pd.bias_desc(), eng),
      y(fwd_pd.dst_desc(), eng), gy(bwd_data_pd.diff_dst_desc(), eng),
      gx(bwd_data_pd.diff_src_desc(), eng), gw(bwd_w_pd.diff_weights_desc(), eng),
      gb(bwd_w_pd.diff_bias_desc(), eng);
  // The backward passes may want other layouts than the forward's; each gets its own inputs.
  memory wd(bwd_data_pd.weights_desc(), eng), xw(bwd_w_pd.src_desc(), eng),
      gyw(bwd_w_pd.diff_dst_desc(), eng);
  // Plain tensors in and out through oneDNN's reorders (outside the timing).
  auto put = [&](const std::vector<float>& v, const memory::dims& dims, tag t, memory& m) {
    memory from({dims, dt::f32, t}, eng, const_cast<float*>(v.data()));
    reorder(from, m).execute(st, from, m);
    st.wait();
  };
  auto take = [&](memory& m, const memory::dims& dims, tag t) {
    std::vector<float> v(
        size_t(std::accumulate(dims.begin(), dims.end(), int64_t(1), std::multiplies<int64_t>())));
    memory to({dims, dt::f32, t}, eng, v.data());
    reorder(m, to).execute(st, m, to);
    st.wait();
    return v;
  };
  const std::string library = plain ? "dnnl nchw" : "dnnl best";
  std::vector<float> weights = ref.w;
  if (checks.broken(library)) weights[0] += 1;
  put(ref.x, x_dims, tag::nchw, x);
  put(ref.x, x_dims, tag::nchw, xw);
  put(weights, w_dims, tag::oihw, w);
  put(weights, w_dims, tag::oihw, wd);
  put(ref.gy, y_dims, tag::nchw, gy);
  put(ref.gy, y_dims, tag::nchw, gyw);
  std::fill_n(static_cast<float*>(b.get_data_handle()), g.o, 0.0f);  // Freight's is bias-free
  convolution_forward fwd(fwd_pd);
  convolution_backward_data bwd_data(bwd_data_pd);
  convolution_backward_weights bwd_w(bwd_w_pd);
  const std::function<void()> passes[3] = {
      [&] {
        fwd.execute(
            st, {{DNNL_ARG_SRC, x}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_BIAS, b}, {DNNL_ARG_DST, y}});
        st.wait();
      },
      [&] {
        bwd_data.execute(
            st, {{DNNL_ARG_DIFF_DST, gy}, {DNNL_ARG_WEIGHTS, wd}, {DNNL_ARG_DIFF_SRC, gx}});
        st.wait();
      },
      [&] {
        bwd_w.execute(st, {{DNNL_ARG_SRC, xw},
                           {DNNL_ARG_DIFF_DST, gyw},
                           {DNNL_ARG_DIFF_WEIGHTS, gw},
                           {DNNL_ARG_DIFF_BIAS, gb}});
        st.wait();
      }};
  std::vector<double> seconds;
  for (int pass = 0; pass < 3; ++pass) {
    passes[pass]();
    const std::vector<float> got = pass == 0   ? take(y, y_dims, tag::nchw)
                                   : pass == 1 ? take(gx, x_dims, tag::nchw)
                                               : take(gw, w_dims, tag::oihw);
    checks.expect(library, where, kPassNames[pass], got.data(),
                  pass == 0   ? ref.y
                  : pass == 1 ? ref.gx
                              : ref.gw);
    seconds.push_back(median_seconds(passes[pass]));
  }
  return seconds;
}

// ================================================================ libxsmm

std::string xsmm_version() {
#if FREIGHT_HAVE_LIBXSMM
  return freight_xsmm_version();
#else
  return "not built (libxsmm_source.h not found: Debian's libxsmm-dev)";
#endif
}

// GFLOP/s of each pass in libxsmm's direct convolution on its blocked layout or on NHWC/RSCK,
// after checking each pass against Freight's result on the same operands. Its forward has no
// bias and its weight gradient no bias gradient (libxsmm 1.17 fuses neither), where Freight's
// and oneDNN's passes include them: one more pass over the output (gradient), which weighs
// most where there are few taps per output (the layers on 1 or 3 input channels).
std::vector<Cell> xsmm_passes(const Conv2dGeometry& g, bool nhwc, const Reference& ref,
                              double flops, Checks& checks, Notes& notes,
                              const std::string& where) {
  const std::string library = nhwc ? "xsmm nhwc" : "xsmm blocked";
#if FREIGHT_HAVE_LIBXSMM
  char why[512] = "";
  std::unique_ptr<freight_xsmm_conv, void (*)(freight_xsmm_conv*)> conv(
      freight_xsmm_conv_create(int(g.n), int(g.c), int(g.h), int(g.w), int(g.o), int(g.kh),
                               int(g.sh), int(g.ph), num_threads(),
                               nhwc ? FREIGHT_XSMM_NHWC : FREIGHT_XSMM_BLOCKED, why, sizeof why),
      freight_xsmm_conv_destroy);
  if (!conv) return unavailable(notes, fmt::format("{} refuses {}: {}", library, where, why));
  std::vector<float> weights = ref.w;
  if (checks.broken(library)) weights[0] += 1;
  freight_xsmm_conv_set(conv.get(), FREIGHT_XSMM_INPUT, ref.x.data());
  freight_xsmm_conv_set(conv.get(), FREIGHT_XSMM_FILTER, weights.data());
  freight_xsmm_conv_set(conv.get(), FREIGHT_XSMM_GRAD_OUTPUT, ref.gy.data());
  const freight_xsmm_pass kinds[3] = {FREIGHT_XSMM_FORWARD, FREIGHT_XSMM_INPUT_GRAD,
                                      FREIGHT_XSMM_WEIGHT_GRAD};
  const freight_xsmm_tensor results[3] = {FREIGHT_XSMM_OUTPUT, FREIGHT_XSMM_GRAD_INPUT,
                                          FREIGHT_XSMM_GRAD_FILTER};
  std::vector<Cell> cells(3);
  for (int pass = 0; pass < 3; ++pass) {
    if (freight_xsmm_conv_run(conv.get(), kinds[pass], why, sizeof why) != 0) {
      cells[size_t(pass)].note =
          notes.add(fmt::format("{} fails {} {}: {}", library, where, kPassNames[pass], why));
      continue;
    }
    const std::vector<float>& want = pass == 0 ? ref.y : pass == 1 ? ref.gx : ref.gw;
    std::vector<float> got(want.size());
    freight_xsmm_conv_get(conv.get(), results[pass], got.data());
    checks.expect(library, where, kPassNames[pass], got.data(), want);
    const double t =
        median_seconds([&] { freight_xsmm_conv_run(conv.get(), kinds[pass], why, sizeof why); });
    cells[size_t(pass)].rate = flops / t / 1e9;
  }
  return cells;
#else
  return unavailable(notes, library + ": " + xsmm_version());
#endif
}

// ================================================================ GEMM only (OpenBLAS, BLIS)

// Row-major C[m, n] = op(A) · op(B) + beta · C, alpha 1.
using Gemm = std::function<void(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a,
                                int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                                int64_t ldc)>;

void openblas_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                   const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(m),
              int(n), int(k), 1.0f, a, int(lda), b, int(ldb), beta, c, int(ldc));
}

void blis_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
               const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  freight_bench::Blis::get().sgemm(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
}

// The operands of the per-image GEMMs of an im2col engine, with K = C·kh·kw taps and P = OH·OW
// output pixels per image:
//   forward         Y_i[O, P]     = W[O, K] · cols_i[K, P]
//   input gradient  dcols_i[K, P] = Wᵀ · dY_i[O, P]         (col2im, not here, adds it to dX_i)
//   weight gradient dW[O, K]      = Σ_i dY_i · cols_iᵀ
// The lowered matrices (cols, dcols) are one per image for the correctness check and one per
// thread for timing, as a per-image engine reuses its buffer from image to image (and the
// lowering that fills it is not counted: in an engine it would have just written the buffer,
// so the GEMM finds it in cache either way).
struct Lowered {
  int64_t n, o, k, p;
  int threads;
  bool per_image;
  std::vector<float> w, cols, dy, y, dcols, dw_parts, dw;

  Lowered(const Conv2dGeometry& g, int nt, bool one_per_image)
      : n(g.n),
        o(g.o),
        k(g.c * g.kh * g.kw),
        p(g.oh * g.ow),
        threads(nt),
        per_image(one_per_image) {
    const size_t lowered = size_t((per_image ? n : nt) * k * p);
    w.resize(size_t(o * k)), cols.resize(lowered), dcols.resize(lowered);
    dy.resize(size_t(n * o * p)), y.resize(size_t(n * o * p));
    dw_parts.resize(size_t(nt * o * k)), dw.resize(size_t(o * k));
  }

  // One pass: threads take contiguous runs of images; each thread's GEMMs are single-threaded
  // (OpenBLAS runs on the calling thread inside a parallel region; BLIS is set to one thread).
  void run(int pass, const Gemm& gemm) {
#pragma omp parallel num_threads(threads)
    {
      const int t = omp_get_thread_num(), team = omp_get_num_threads();
      const int64_t i0 = n * t / team, i1 = n * (t + 1) / team;
      float* part = dw_parts.data() + t * o * k;
      if (pass == 2 && i0 == i1) std::fill(part, part + o * k, 0.0f);
      for (int64_t i = i0; i < i1; ++i) {
        const size_t at = size_t((per_image ? i : t) * k * p);
        const float* dyi = dy.data() + i * o * p;
        if (pass == 0)
          gemm(false, false, o, p, k, w.data(), k, cols.data() + at, p, 0, y.data() + i * o * p, p);
        else if (pass == 1)
          gemm(true, false, k, p, o, w.data(), k, dyi, p, 0, dcols.data() + at, p);
        else
          gemm(false, true, o, k, p, dyi, p, cols.data() + at, p, i == i0 ? 0.0f : 1.0f, part, k);
      }
    }
    if (pass == 2) {  // the threads' partial sums: O·K·threads additions, counted
      std::copy(dw_parts.begin(), dw_parts.begin() + o * k, dw.begin());
      for (int t = 1; t < threads; ++t)
        for (int64_t j = 0; j < o * k; ++j) dw[size_t(j)] += dw_parts[size_t(t * o * k + j)];
    }
  }

  // The pass's result: Y, the dcols buffers, or dW.
  const std::vector<float>& result(int pass) const {
    return pass == 0 ? y : pass == 1 ? dcols : dw;
  }
};

// cols[(c, a, b), pixel] = x[c, oy·sh − ph + a, ox·sw − pw + b] (0 in the padding): one image.
void im2col(const float* x, const Conv2dGeometry& g, float* cols) {
  for (int64_t c = 0; c < g.c; ++c)
    for (int64_t a = 0; a < g.kh; ++a)
      for (int64_t b = 0; b < g.kw; ++b)
        for (int64_t oy = 0; oy < g.oh; ++oy)
          for (int64_t ox = 0; ox < g.ow; ++ox) {
            const int64_t iy = oy * g.sh - g.ph + a, ix = ox * g.sw - g.pw + b;
            const bool inside = iy >= 0 && iy < g.h && ix >= 0 && ix < g.w;
            *cols++ = inside ? x[(c * g.h + iy) * g.w + ix] : 0.0f;
          }
}

// The adjoint: each dcols entry added to the input pixel it was read from. One image, dx zeroed.
void col2im(const float* dcols, const Conv2dGeometry& g, float* dx) {
  for (int64_t c = 0; c < g.c; ++c)
    for (int64_t a = 0; a < g.kh; ++a)
      for (int64_t b = 0; b < g.kw; ++b)
        for (int64_t oy = 0; oy < g.oh; ++oy)
          for (int64_t ox = 0; ox < g.ow; ++ox, ++dcols) {
            const int64_t iy = oy * g.sh - g.ph + a, ix = ox * g.sw - g.pw + b;
            if (iy >= 0 && iy < g.h && ix >= 0 && ix < g.w) dx[(c * g.h + iy) * g.w + ix] += *dcols;
          }
}

// The GEMM columns' check: at a batch of two images per thread, im2col, the per-image GEMMs of
// each pass with this BLAS and col2im must give Freight's three results.
void check_lowering(const ConvShape& s, const std::string& library, const Gemm& gemm, int nt,
                    Checks& checks) {
  const Conv2dGeometry g = geometry(s, 2 * nt);
  const Reference ref = reference(g);
  Lowered l(g, nt, true);
  l.w = ref.w;
  if (checks.broken(library)) l.w[0] += 1;
  l.dy = ref.gy;
  for (int64_t i = 0; i < l.n; ++i)
    im2col(ref.x.data() + i * g.c * g.h * g.w, g, l.cols.data() + i * l.k * l.p);
  const std::string where = fmt::format("{} batch {} (im2col lowering)", s.name, g.n);
  l.run(0, gemm);
  checks.expect(library, where, kPassNames[0], l.y.data(), ref.y);
  l.run(1, gemm);
  std::vector<float> gx(ref.gx.size(), 0.0f);
  for (int64_t i = 0; i < l.n; ++i)
    col2im(l.dcols.data() + i * l.k * l.p, g, gx.data() + i * g.c * g.h * g.w);
  checks.expect(library, where, kPassNames[1], gx.data(), ref.gx);
  l.run(2, gemm);
  checks.expect(library, where, kPassNames[2], l.dw.data(), ref.gw);
}

// GFLOP/s of each pass's GEMMs with OpenBLAS and with BLIS on the same random operands, and
// the check that both gave the same results.
void gemm_passes(const Conv2dGeometry& g, double flops, const std::string& where, Checks& checks,
                 Notes& notes, std::vector<Cell>& openblas, std::vector<Cell>& blis) {
  const freight_bench::Blis& lib = freight_bench::Blis::get();
  Lowered l(g, num_threads(), false);
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1, 1);
  for (auto* v : {&l.w, &l.cols, &l.dy})
    for (float& e : *v) e = u(rng);
  openblas.assign(3, Cell{});
  blis = lib.ok() ? std::vector<Cell>(3) : unavailable(notes, "BLIS " + lib.status());
  double worst = 0;
  for (int pass = 0; pass < 3; ++pass) {
    openblas[size_t(pass)].rate = flops / median_seconds([&] { l.run(pass, openblas_gemm); }) / 1e9;
    if (!lib.ok()) continue;
    const std::vector<float> by_openblas = l.result(pass);
    blis[size_t(pass)].rate = flops / median_seconds([&] { l.run(pass, blis_gemm); }) / 1e9;
    worst = std::max(worst, checks.expect("openblas vs blis", where, kPassNames[pass],
                                          l.result(pass).data(), by_openblas));
  }
  if (lib.ok())
    std::fprintf(stderr, "%s: GEMM only, OpenBLAS vs BLIS: max |diff| / max |OpenBLAS| = %.1e\n",
                 where.c_str(), worst);
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> batches = {64, 256};
  std::vector<std::string> only;
  std::string markdown, broken;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--batch-sizes" && has_value) {
      batches.clear();
      for (const std::string& b : split(argv[++i])) batches.push_back(std::stoll(b));
    } else if (a == "--shapes" && has_value) {
      only = split(argv[++i]);
    } else if (a == "--markdown" && has_value) {
      markdown = argv[++i];
    } else if (a == "--break-check" && has_value) {
      broken = argv[++i];
      std::replace(broken.begin(), broken.end(), '-', ' ');
    } else {
      std::fprintf(stderr,
                   "usage: freight_conv_libs [--batch-sizes 64,256] [--shapes NAME,...] "
                   "[--markdown FILE] [--break-check dnnl-nchw|dnnl-best|xsmm-blocked|"
                   "xsmm-nhwc|openblas|blis]\n");
      return 2;
    }
  }
  const DevicePeaks peaks = peaks_for(Device::cpu());
  const dnnl_version_t* v = dnnl_version();
  const freight_bench::Blis& blis = freight_bench::Blis::get();
  Checks checks(broken);
  Notes notes;
  const int nt = num_threads();
  const std::string batch_list = [&] {
    std::string b;
    for (int64_t x : batches) {
      if (!b.empty()) b += ',';
      b += std::to_string(x);
    }
    return b;
  }();
  std::string md = fmt::format(
      "# Convolutions of the zoo, per pass: Freight's engines against oneDNN and libxsmm\n\n"
      "- cpu: {}, {} threads; fp32 GEMM peak {:.1f} GFLOP/s ({})\n"
      "- Freight: {}\n- oneDNN {}.{}.{} (CPU runtime: {})\n"
      "- libxsmm {}: direct convolution, fp32, in its channel-blocked layout (xsmm blocked) and "
      "NHWC/RSCK (xsmm nhwc), reorders not counted; no bias in its forward or bias gradient in "
      "its weight gradient (Freight's and oneDNN's passes have them)\n"
      "- BLIS {}\n"
      "- GEMM only (lowering not counted): not convolutions but the GEMMs an im2col engine runs "
      "for the pass, per image: forward W[O, C·k·k] · cols[C·k·k, OH·OW]; input gradient "
      "Wᵀ · dY[O, OH·OW] (col2im not counted); weight gradient dY · colsᵀ summed over the "
      "images. Threads take whole images, one single-threaded GEMM each, in OpenBLAS "
      "(Freight's) and in BLIS: the ceiling of an im2col engine that lowers image by image on "
      "that BLAS. Not counted in best / freight / best\n"
      "- command: `freight_conv_libs --batch-sizes {}`; GFLOP/s = 2 x multiply-adds of the pass "
      "/ median time; % peak against the GEMM peak\n",
      peaks.name, nt, peaks.fp32_flops / 1e9, peaks.from_cache ? "cached peaks" : "measured now",
      build_info(), v->major, v->minor, v->patch,
      v->cpu_runtime == DNNL_RUNTIME_OMP ? "OpenMP" : "other", xsmm_version(), blis.status(),
      batch_list);
  const std::string table_head =
      "| shape | batch | pass | freight engine | freight GFLOP/s | % peak | own engine | "
      "own GFLOP/s | onednn engine | winograd engine | winograd F2 | im2col+BLAS | "
      "dnnl nchw | dnnl best | xsmm blocked | xsmm nhwc | best | freight / best | "
      "GEMM only: OpenBLAS | GEMM only: BLIS |\n"
      "|---|---:|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|-"
      "--:|"
      "\n";
  std::fputs((md + "\n" + table_head).c_str(), stdout);
  std::string table;
  const int winograd_note = notes.add(
      "oneDNN's Winograd F(4x4, 3x3) (winograd engine: Freight's Winograd engine forced, reorders "
      "counted) takes 3x3 stride-1 convolutions on whole 16-channel vectors only, with AVX-512");
  const int f2_note = notes.add(
      "Freight's Winograd F(2x2, 3x3) (winograd F2: forced) takes every pass of 3x3 stride-1 "
      "convolutions (the input gradient where the padding is at most 2), with the avx2 or avx512 "
      "kernels");
  for (const ConvShape& s : kShapes) {
    if (!only.empty() && std::find(only.begin(), only.end(), s.name) == only.end()) continue;
    check_lowering(s, "openblas", openblas_gemm, nt, checks);
    if (blis.ok()) check_lowering(s, "blis", blis_gemm, nt, checks);
    for (int64_t n : batches) {
      const Conv2dGeometry g = geometry(s, n);
      const std::string where = fmt::format("{} batch {}", s.name, n);
      const double flops = 2.0 * double(n * g.oh * g.ow) * double(s.o * s.c * s.k * s.k);
      const Reference ref = reference(g);
      const Timed ours = freight_passes(g, cpu::ConvEngine::Auto);
      const Timed own = freight_passes(g, cpu::ConvEngine::Auto, true);
      const Timed onednn = freight_passes(g, cpu::ConvEngine::Dnnl);
      const Timed winograd = freight_passes(g, cpu::ConvEngine::Winograd);
      const Timed f2 = cpu::conv_has_tile_engines() ? freight_passes(g, cpu::ConvEngine::WinogradF2)
                                                    : Timed{{1, 1, 1}, {"-", "-", "-"}};
      const Timed blas = freight_passes(g, cpu::ConvEngine::Blas);
      const std::vector<double> plain = dnnl_passes(g, true, ref, checks, where),
                                best = dnnl_passes(g, false, ref, checks, where);
      const std::vector<Cell> xsmm = xsmm_passes(g, false, ref, flops, checks, notes, where),
                              xsmm_nhwc = xsmm_passes(g, true, ref, flops, checks, notes, where);
      std::vector<Cell> gemm_openblas, gemm_blis;
      gemm_passes(g, flops, where, checks, notes, gemm_openblas, gemm_blis);
      for (int pass = 0; pass < 3; ++pass) {
        const size_t p = size_t(pass);
        const double rate = flops / ours.seconds[p] / 1e9;
        // The complete convolutions, in column order; the fastest names the row's "best".
        const std::vector<std::pair<const char*, Cell>> rivals = {
            {"freight", Cell{rate, 0}},
            {"own", Cell{flops / own.seconds[p] / 1e9, 0}},
            {"onednn engine", Cell{flops / onednn.seconds[p] / 1e9, 0}},
            {"winograd engine", winograd.engines[p] == "winograd"
                                    ? Cell{flops / winograd.seconds[p] / 1e9, 0}
                                    : Cell{0, winograd_note}},
            {"winograd F2", f2.engines[p] == "winograd F2" ? Cell{flops / f2.seconds[p] / 1e9, 0}
                                                           : Cell{0, f2_note}},
            {"im2col+BLAS", Cell{flops / blas.seconds[p] / 1e9, 0}},
            {"dnnl nchw", Cell{flops / plain[p] / 1e9, 0}},
            {"dnnl best", Cell{flops / best[p] / 1e9, 0}},
            {"xsmm blocked", xsmm[p]},
            {"xsmm nhwc", xsmm_nhwc[p]}};
        const auto top = std::max_element(rivals.begin(), rivals.end(), [](auto& a, auto& b) {
          return (a.second.note ? 0.0 : a.second.rate) < (b.second.note ? 0.0 : b.second.rate);
        });
        std::string line =
            fmt::format("| {} | {} | {} | {} | {:.1f} | {:.0f}% |", s.name, n, kPassNames[pass],
                        ours.engines[p], rate, 100 * rate * 1e9 / peaks.fp32_flops);
        for (size_t r = 1; r < rivals.size(); ++r) {
          if (r == 1) line += fmt::format(" {} |", own.engines[p]);
          line += fmt::format(" {} |", show(rivals[r].second));
        }
        line += fmt::format(" {} | {:.2f} | {} | {} |\n", top->first, rate / top->second.rate,
                            show(gemm_openblas[p]), show(gemm_blis[p]));
        std::fputs(line.c_str(), stdout);
        std::fflush(stdout);
        table += line;
      }
    }
  }
  std::string tail = fmt::format(
      "\nEvery library's three passes were checked against Freight's on the same operands before "
      "being timed (max |difference| / max |Freight| within {:.0e}); the worst seen: {}.\n",
      kTolerance, checks.summary());
  if (!notes.texts().empty()) {
    tail += "\n";
    for (size_t i = 0; i < notes.texts().size(); ++i)
      tail += fmt::format("- [{}] {}\n", i + 1, notes.texts()[i]);
  }
  std::fputs(tail.c_str(), stdout);
  md += "\n" + table_head + table + tail;
  if (!markdown.empty()) std::ofstream(markdown) << md;
  return 0;
}
