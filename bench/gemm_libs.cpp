// Every float GEMM of the zoo's linear and LSTM layers, forward, input gradient and weight
// gradient, in the libraries Freight can run it on, timed in one run on this machine: which is
// fastest on each exact shape, and whether Freight's rule (backend/cpu/sgemm_onednn.h) picks it.
//
//   freight_gemm_libs [--batch-sizes 1,64,256] [--threads 1,N] [--markdown FILE]
//                     [--break-check LIBRARY]
//
// Columns, each the median of repeated calls after a warm-up:
//   freight         kernels::gemm as training calls it: Freight's split (sgemm_split.h), the
//                   thread cap of the cached calibration (`freight devices --measure`) and, per
//                   product or piece, the library the rule picks ("onednn, transposed": a
//                   forward run as its transpose, blas_cpu.cpp);
//   openblas split  the same with oneDNN turned off (FREIGHT_GEMM_DNNL=0): what Freight ran
//                   before oneDNN's sgemm;
//   openblas        one cblas_sgemm call, OpenBLAS's own threading;
//   onednn          one dnnl_sgemm call, oneDNN's own threading;
//   blis            bli_sgemm (dlopen'ed, blis_dl.h), on one thread: 1-thread rows only.
// GFLOP/s count 2 per multiply-add; "% peak" is Freight's rate against the GEMM peak of `freight
// devices --measure` for the thread count (cached, or measured now).
//
// Before a library is timed its product is compared with Freight's on the same operands: a max
// |difference| / max |Freight| above 1e-4 stops the program with status 1. --break-check LIBRARY
// (openblas, onednn, blis) adds 1 to one element of the A that library is given, to see the
// check fail.
#include <cblas.h>
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "backend/cpu/sgemm_onednn.h"
#include "blis_dl.h"
#include "freight/freight.h"
#include "freight/parallel_thresholds.h"
#include "freight/peaks.h"
#include "ops/kernels/blas.h"

using namespace freight;

namespace {

// One product: C[m, n] = op(A)[m, k]·op(B)[k, n].
struct Product {
  std::string name;  // model, layer and pass
  int64_t m, n, k;
  bool ta, tb;
};

// A linear layer in -> out on `rows` rows (the batch, or batch x steps): forward Y = X·Wᵀ, input
// gradient dX = dY·W, weight gradient dW = dYᵀ·X.
void add_linear(std::vector<Product>& out, const std::string& name, int64_t rows, int64_t in,
                int64_t outs) {
  out.push_back({name + " fwd", rows, outs, in, false, true});
  out.push_back({name + " dX", rows, in, outs, false, false});
  out.push_back({name + " dW", outs, in, rows, true, false});
}

// The zoo's linear layers (models/*.json) and the products of its LSTMs that go through the GEMM
// (the input projection of a wide input over all steps, the recurrent product of one step, the
// weight gradient over all steps; lstm_cpu.cpp), at batch b.
std::vector<Product> products(int64_t b) {
  std::vector<Product> p;
  add_linear(p, "mlp 784-512", b, 784, 512);
  add_linear(p, "mlp 512-256", b, 512, 256);
  add_linear(p, "mlp 256-10", b, 256, 10);
  add_linear(p, "fcn5 784-2048", b, 784, 2048);
  add_linear(p, "fcn5 2048-4096", b, 2048, 4096);
  add_linear(p, "fcn5 4096-1024", b, 4096, 1024);
  add_linear(p, "mnist-cnn 9216-128", b, 9216, 128);
  add_linear(p, "lenet5 400-120", b, 400, 120);
  add_linear(p, "alexnet-cifar 1024-10", b, 1024, 10);
  add_linear(p, "lstm-ptb 256-10000", b * 32, 256, 10000);
  p.push_back({"lstm-ptb input projection", b * 32, 1024, 256, false, true});
  p.push_back({"lstm-ptb recurrent step", b, 1024, 256, false, true});
  p.push_back({"lstm-ptb dW over steps", 1024, 512, b * 32, true, false});
  p.push_back({"lstm-rows dW over steps", 512, 156, b * 28, true, false});
  return p;
}

double seconds_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Median of at least 5 calls and about 0.3 s after two warm-up calls.
double median_seconds(const std::function<void()>& f) {
  f();
  f();
  std::vector<double> t;
  double total = 0;
  while ((t.size() < 5 || total < 0.3) && t.size() < 1000) {
    const double s = seconds_now();
    f();
    t.push_back(seconds_now() - s);
    total += t.back();
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// max |a - b| / max |b| over the m·n elements.
double relative_difference(const float* a, const float* b, int64_t count) {
  double diff = 0, scale = 0;
  for (int64_t i = 0; i < count; ++i) {
    diff = std::max(diff, std::fabs(double(a[i]) - double(b[i])));
    scale = std::max(scale, std::fabs(double(b[i])));
  }
  return scale > 0 ? diff / scale : diff;
}

std::vector<int64_t> parse_list(const std::string& s) {
  std::vector<int64_t> out;
  size_t at = 0;
  while (at <= s.size()) {
    const size_t comma = s.find(',', at);
    out.push_back(
        std::stoll(s.substr(at, comma == std::string::npos ? std::string::npos : comma - at)));
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return out;
}

std::string rate(double flops, double s) {
  return s > 0 ? fmt::format("{:.1f}", flops / s / 1e9) : "-";
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> batches = {1, 64, 256}, thread_counts = {1, num_threads()};
  std::string markdown, broken;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--batch-sizes" && has_value) {
      batches = parse_list(argv[++i]);
    } else if (a == "--threads" && has_value) {
      thread_counts = parse_list(argv[++i]);
    } else if (a == "--markdown" && has_value) {
      markdown = argv[++i];
    } else if (a == "--break-check" && has_value) {
      broken = argv[++i];
    } else {
      std::fprintf(stderr,
                   "usage: freight_gemm_libs [--batch-sizes 1,64,256] [--threads 1,N] "
                   "[--markdown FILE] [--break-check openblas|onednn|blis]\n");
      return 2;
    }
  }
  thread_counts.erase(std::unique(thread_counts.begin(), thread_counts.end()), thread_counts.end());
  if (!cpu::onednn_sgemm_built()) {
    std::fprintf(stderr, "freight_gemm_libs: this Freight was built without oneDNN\n");
    return 2;
  }
  // The thread caps training runs under (the freight command applies the cached calibration
  // the same way; without it the defaults would cap small products differently).
  use_cached_parallel_thresholds();
  const freight_bench::Blis& blis = freight_bench::Blis::get();
  const int saved_threads = num_threads();
  const bool saved_allowed = cpu::gemm_dnnl_allowed();
  std::string md = fmt::format(
      "# Float GEMMs of the zoo's linear and LSTM layers: OpenBLAS, oneDNN and BLIS\n\n"
      "- cpu: {}\n- Freight: {}\n- BLIS {}\n"
      "- command: `freight_gemm_libs --batch-sizes {} --threads {}`; median of repeated calls; "
      "GFLOP/s = 2 x multiply-adds / time; % peak: Freight's rate against the GEMM peak of that "
      "thread count\n"
      "- freight: what training runs (Freight's split and, per product or piece, the library "
      "backend/cpu/sgemm_onednn.h picks); openblas split: the same on OpenBLAS only (what ran "
      "before oneDNN's sgemm); openblas, onednn: one call, the library's own threading; blis: "
      "one thread\n\n"
      "| product | threads | m x n x k | op | freight picks | freight GFLOP/s | % peak | "
      "openblas split | openblas | onednn | blis | best | freight / best |\n"
      "|---|---:|---|---|---|---:|---:|---:|---:|---:|---:|---|---:|\n",
      peaks_for(Device::cpu()).name, build_info(), blis.status(), fmt::join(batches, ","),
      fmt::join(thread_counts, ","));
  Generator gen(5);
  int failures = 0;
  for (int64_t threads : thread_counts) {
    set_num_threads(int(threads));
    const double peak = peaks_for(Device::cpu()).fp32_flops;
    for (int64_t b : batches)
      for (const Product& p : products(b)) {
        Tensor a = Tensor::normal(p.ta ? Shape{p.k, p.m} : Shape{p.m, p.k}, 0, 1, DType::F32,
                                  Device::cpu(), &gen);
        Tensor bm = Tensor::normal(p.tb ? Shape{p.n, p.k} : Shape{p.k, p.n}, 0, 1, DType::F32,
                                   Device::cpu(), &gen);
        Tensor c = Tensor::zeros({p.m, p.n}, DType::F32, Device::cpu());
        Tensor want = Tensor::zeros({p.m, p.n}, DType::F32, Device::cpu());
        const int64_t lda = p.ta ? p.m : p.k, ldb = p.tb ? p.k : p.n;
        const double flops = 2.0 * double(p.m) * double(p.n) * double(p.k);
        cpu::set_gemm_dnnl_allowed(true);
        kernels::gemm(DeviceType::CPU, a, p.ta, bm, p.tb, want, 1.0, 0.0);
        const bool picks_onednn =
            cpu::use_onednn_sgemm(p.m, p.n, p.k, p.ta, p.tb, ldb, int(threads));
        // Each library's product, checked against Freight's before it is timed.
        auto check_then_time = [&](const std::string& lib, const std::function<void()>& run) {
          float* pa = a.data<float>();
          if (broken == lib) pa[0] += 1;
          c.fill_(0.0);
          run();
          if (broken == lib) pa[0] -= 1;
          const double d = relative_difference(c.data<float>(), want.data<float>(), p.m * p.n);
          if (!(d <= 1e-4)) {
            std::fprintf(stderr, "%s: %s on %lld threads differs from Freight's by %.3g\n",
                         lib.c_str(), p.name.c_str(), (long long)threads, d);
            ++failures;
            return 0.0;
          }
          return median_seconds(run);
        };
        auto freight_gemm = [&] { kernels::gemm(DeviceType::CPU, a, p.ta, bm, p.tb, c, 1.0, 0.0); };
        const double t_freight = check_then_time("freight", freight_gemm);
        cpu::set_gemm_dnnl_allowed(false);
        const double t_split = check_then_time("openblas split", freight_gemm);
        cpu::set_gemm_dnnl_allowed(true);
        const double t_openblas = check_then_time("openblas", [&] {
          cblas_sgemm(CblasRowMajor, p.ta ? CblasTrans : CblasNoTrans,
                      p.tb ? CblasTrans : CblasNoTrans, int(p.m), int(p.n), int(p.k), 1.0f,
                      a.data<float>(), int(lda), bm.data<float>(), int(ldb), 0.0f, c.data<float>(),
                      int(p.n));
        });
        const double t_onednn = check_then_time("onednn", [&] {
          cpu::onednn_sgemm(p.ta, p.tb, p.m, p.n, p.k, 1.0f, a.data<float>(), lda, bm.data<float>(),
                            ldb, 0.0f, c.data<float>(), p.n);
        });
        double t_blis = 0;
        if (threads == 1 && blis.ok())
          t_blis = check_then_time("blis", [&] {
            blis.sgemm(p.ta, p.tb, p.m, p.n, p.k, a.data<float>(), lda, bm.data<float>(), ldb, 0.0f,
                       c.data<float>(), p.n);
          });
        const std::pair<double, const char*> libs[] = {{t_freight, "freight"},
                                                       {t_split, "openblas split"},
                                                       {t_openblas, "openblas"},
                                                       {t_onednn, "onednn"},
                                                       {t_blis, "blis"}};
        std::pair<double, const char*> best = {0, "-"};
        for (const auto& l : libs)
          if (l.first > 0 && (best.first == 0 || l.first < best.first)) best = l;
        md += fmt::format(
            "| {} (batch {}) | {} | {}x{}x{} | {}{} | {} | {} | {} | {} | {} | {} | {} | {} | "
            "{} |\n",
            p.name, b, threads, p.m, p.n, p.k, p.ta ? 'T' : 'N', p.tb ? 'T' : 'N',
            cpu::use_transposed_forward(p.m, p.n, p.k, p.ta, p.tb) ? "onednn, transposed"
            : picks_onednn                                         ? "onednn"
                                                                   : "openblas",
            rate(flops, t_freight),
            t_freight > 0 && peak > 0 ? fmt::format("{:.0f}%", 100 * flops / t_freight / peak)
                                      : "-",
            rate(flops, t_split), rate(flops, t_openblas), rate(flops, t_onednn),
            threads == 1 ? rate(flops, t_blis) : "-", best.second,
            t_freight > 0 && best.first > 0 ? fmt::format("{:.2f}", t_freight / best.first) : "-");
        std::fprintf(stderr, "%s (batch %lld, %lld threads) done\n", p.name.c_str(), (long long)b,
                     (long long)threads);
      }
  }
  set_num_threads(saved_threads);
  cpu::set_gemm_dnnl_allowed(saved_allowed);
  if (failures > 0) {
    std::fprintf(stderr, "freight_gemm_libs: %d products differ from Freight's\n", failures);
    return 1;
  }
  if (markdown.empty()) {
    std::fputs(md.c_str(), stdout);
  } else {
    std::ofstream out(markdown);
    out << md;
    if (!out) {
      std::fprintf(stderr, "freight_gemm_libs: cannot write %s\n", markdown.c_str());
      return 1;
    }
  }
  return 0;
}
