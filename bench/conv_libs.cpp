// Every convolution of the zoo's CNNs, pass by pass, in Freight's engines and in oneDNN (the
// library PyTorch's CPU convolutions run on), timed in one run on this machine: which library
// is fastest on each exact shape, and how close each comes to the machine's float32 GEMM peak.
//
//   freight_conv_libs [--batch-sizes 64,256] [--shapes NAME,...] [--markdown FILE]
//
// Columns, each the median of repeated calls after a warm-up, all threads:
//   freight     the engine Freight picks (conv_cpu.cpp's rule), the path training runs;
//   im2col+BLAS Freight's portable engine: unrolled patches and one OpenBLAS sgemm per chunk;
//   dnnl nchw   oneDNN on the plain NCHW tensors Freight keeps (any reordering oneDNN needs is
//               inside the call, as it would be if Freight called it);
//   dnnl best   oneDNN on the layouts it prefers (channel-blocked), reorders not counted: the
//               ceiling a framework that keeps oneDNN's layouts between layers can reach.
// GFLOP/s count 2 per multiply-add of the pass (forward, input gradient and weight gradient all
// have the forward's count); "% peak" is against the GEMM peak measured by `freight devices
// --measure` (the cached figure for this build, or a fresh measurement).
#include <fmt/format.h>
#include <dnnl.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cpu/conv_cpu.h"
#include "freight/freight.h"
#include "freight/peaks.h"
#include "ops/kernels/conv.h"

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
  const char* names[] = {"auto", "im2col+BLAS", "panel", "implicit", "direct"};
  for (int e = 1; e <= 4; ++e)
    if (cpu::conv_engine_runs(pass, cpu::ConvEngine(e)) > before[size_t(e)]) return names[e];
  return "?";
}

// Seconds of each pass in Freight with `engine` (Auto: its own choice).
Timed freight_passes(const Conv2dGeometry& g, cpu::ConvEngine engine) {
  Generator gen(1);
  Tensor x = Tensor::normal({g.n, g.c, g.h, g.w}, 0, 1, DType::F32, Device::cpu(), &gen);
  Tensor w = Tensor::normal({g.o, g.c, g.kh, g.kw}, 0, 0.1, DType::F32, Device::cpu(), &gen);
  Tensor b = Tensor::normal({g.o}, 0, 1, DType::F32, Device::cpu(), &gen);
  Tensor gy = Tensor::normal({g.n, g.o, g.oh, g.ow}, 0, 1, DType::F32, Device::cpu(), &gen);
  Tensor y = Tensor::empty({g.n, g.o, g.oh, g.ow});
  Tensor gx = Tensor::empty({g.n, g.c, g.h, g.w});
  Tensor gw = Tensor::empty({g.o, g.c, g.kh, g.kw}), gb = Tensor::empty({g.o});
  const std::function<void()> passes[3] = {
      [&] { kernels::conv2d_forward(DeviceType::CPU, x, w, b, g, y); },
      [&] { kernels::conv2d_backward_input(DeviceType::CPU, gy, w, g, gx); },
      [&] { kernels::conv2d_backward_weight(DeviceType::CPU, gy, x, g, gw, gb); }};
  cpu::set_conv_engine(engine);
  Timed t;
  for (int pass = 0; pass < 3; ++pass) {
    std::vector<int64_t> before(5);
    for (int e = 0; e < 5; ++e) before[size_t(e)] = cpu::conv_engine_runs(pass, cpu::ConvEngine(e));
    t.seconds.push_back(median_seconds(passes[pass]));
    t.engines.push_back(engine_that_ran(pass, before));
  }
  cpu::set_conv_engine(cpu::ConvEngine::Auto);
  return t;
}

void fill(dnnl::memory& m, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1, 1);
  float* p = static_cast<float*>(m.get_data_handle());
  const size_t n = m.get_desc().get_size() / sizeof(float);
  for (size_t i = 0; i < n; ++i) p[i] = u(rng);
}

// Seconds of each pass in oneDNN, on plain NCHW tensors or on the layouts it picks.
std::vector<double> dnnl_passes(const Conv2dGeometry& g, bool plain) {
  using namespace dnnl;
  using tag = memory::format_tag;
  using dt = memory::data_type;
  engine eng(engine::kind::cpu, 0);
  stream st(eng);
  const tag act = plain ? tag::nchw : tag::any, wt = plain ? tag::oihw : tag::any;
  memory::desc src({g.n, g.c, g.h, g.w}, dt::f32, act), wei({g.o, g.c, g.kh, g.kw}, dt::f32, wt),
      bia({g.o}, dt::f32, tag::x), dst({g.n, g.o, g.oh, g.ow}, dt::f32, act);
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
  std::mt19937 rng(1);
  memory x(fwd_pd.src_desc(), eng), w(fwd_pd.weights_desc(), eng), b(fwd_pd.bias_desc(), eng),
      y(fwd_pd.dst_desc(), eng), gy(bwd_data_pd.diff_dst_desc(), eng),
      gx(bwd_data_pd.diff_src_desc(), eng), gw(bwd_w_pd.diff_weights_desc(), eng),
      gb(bwd_w_pd.diff_bias_desc(), eng);
  // The backward passes may want other layouts than the forward's; each gets its own inputs.
  memory wd(bwd_data_pd.weights_desc(), eng), xw(bwd_w_pd.src_desc(), eng),
      gyw(bwd_w_pd.diff_dst_desc(), eng);
  for (memory* m : {&x, &w, &b, &gy, &wd, &xw, &gyw}) fill(*m, rng);
  convolution_forward fwd(fwd_pd);
  convolution_backward_data bwd_data(bwd_data_pd);
  convolution_backward_weights bwd_w(bwd_w_pd);
  return {median_seconds([&] {
            fwd.execute(
                st,
                {{DNNL_ARG_SRC, x}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_BIAS, b}, {DNNL_ARG_DST, y}});
            st.wait();
          }),
          median_seconds([&] {
            bwd_data.execute(
                st, {{DNNL_ARG_DIFF_DST, gy}, {DNNL_ARG_WEIGHTS, wd}, {DNNL_ARG_DIFF_SRC, gx}});
            st.wait();
          }),
          median_seconds([&] {
            bwd_w.execute(st, {{DNNL_ARG_SRC, xw},
                               {DNNL_ARG_DIFF_DST, gyw},
                               {DNNL_ARG_DIFF_WEIGHTS, gw},
                               {DNNL_ARG_DIFF_BIAS, gb}});
            st.wait();
          })};
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
  std::string markdown;
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
    } else {
      std::fprintf(stderr,
                   "usage: freight_conv_libs [--batch-sizes 64,256] [--shapes NAME,...] "
                   "[--markdown FILE]\n");
      return 2;
    }
  }
  const DevicePeaks peaks = peaks_for(Device::cpu());
  const dnnl_version_t* v = dnnl_version();
  std::string md = fmt::format(
      "# Convolutions of the zoo, per pass: Freight's engines against oneDNN\n\n"
      "- cpu: {}, {} threads; fp32 GEMM peak {:.1f} GFLOP/s ({})\n"
      "- Freight: {}\n- oneDNN {}.{}.{} (CPU runtime: {})\n"
      "- command: `freight_conv_libs --batch-sizes {}`; GFLOP/s = 2 x multiply-adds of the pass "
      "/ median time; % peak against the GEMM peak\n\n"
      "| shape | batch | pass | freight engine | freight GFLOP/s | % peak | im2col+BLAS | "
      "dnnl nchw | dnnl best | best | freight / best |\n"
      "|---|---:|---|---|---:|---:|---:|---:|---:|---|---:|\n",
      peaks.name, num_threads(), peaks.fp32_flops / 1e9,
      peaks.from_cache ? "cached peaks" : "measured now", build_info(), v->major, v->minor,
      v->patch, v->cpu_runtime == DNNL_RUNTIME_OMP ? "OpenMP" : "other", [&] {
        std::string b;
        for (int64_t x : batches) b += (b.empty() ? "" : ",") + std::to_string(x);
        return b;
      }());
  std::fputs(md.c_str(), stdout);
  for (const ConvShape& s : kShapes) {
    if (!only.empty() && std::find(only.begin(), only.end(), s.name) == only.end()) continue;
    for (int64_t n : batches) {
      const Conv2dGeometry g = geometry(s, n);
      const double flops = 2.0 * double(n * g.oh * g.ow) * double(s.o * s.c * s.k * s.k);
      const Timed ours = freight_passes(g, cpu::ConvEngine::Auto);
      const Timed blas = freight_passes(g, cpu::ConvEngine::Blas);
      const std::vector<double> plain = dnnl_passes(g, true), best = dnnl_passes(g, false);
      for (int pass = 0; pass < 3; ++pass) {
        const double rate = flops / ours.seconds[size_t(pass)] / 1e9;
        const double r_blas = flops / blas.seconds[size_t(pass)] / 1e9,
                     r_plain = flops / plain[pass] / 1e9, r_best = flops / best[pass] / 1e9;
        const double top = std::max({rate, r_blas, r_plain, r_best});
        const char* who = top == rate      ? "freight"
                          : top == r_blas  ? "im2col+BLAS"
                          : top == r_plain ? "dnnl nchw"
                                           : "dnnl best";
        std::string line = fmt::format(
            "| {} | {} | {} | {} | {:.1f} | {:.0f}% | {:.1f} | {:.1f} | {:.1f} | {} | {:.2f} |\n",
            s.name, n, kPassNames[pass], ours.engines[size_t(pass)], rate,
            100 * rate * 1e9 / peaks.fp32_flops, r_blas, r_plain, r_best, who, rate / top);
        std::fputs(line.c_str(), stdout);
        std::fflush(stdout);
        md += line;
      }
    }
  }
  if (!markdown.empty()) std::ofstream(markdown) << md;
  return 0;
}
