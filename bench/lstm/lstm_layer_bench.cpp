// Times lstm_layer forward + backward (and forward alone, without gradients) for the shapes of
// bench/lstm/torch_lstm.py, printing one JSON line per shape. Not part of the CMake build (the
// bench/ tree has no CMakeLists yet); build it against a Release build of the library:
//   g++ -O2 -std=c++20 -Iinclude -Isrc bench/lstm/lstm_layer_bench.cpp -Lbuild -lfreight -lfmt \
//       -fopenmp -Wl,-rpath,$PWD/build -o build/lstm_layer_bench
//   OMP_NUM_THREADS=2 build/lstm_layer_bench [--threads N] [--reps N] [--step-loop]
// --step-loop removes the CPU whole-sequence kernels, so the op runs its own loop over the cell
// kernels and per-step (BLAS-threaded) GEMMs, as a device without sequence kernels would.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "freight/freight.h"
#include "ops/kernels/lstm.h"

using namespace freight;

namespace {
double median_ms(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double g_min = 0;  // the fastest repetition of the last time_ms call
double g_cpu = 0;  // median process CPU time (all threads) of the last time_ms call, ms

double cpu_now_ms() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

template <class Fn>
double time_ms(int reps, Fn&& fn) {
  for (int i = 0; i < 3; ++i) fn();
  std::vector<double> ts, cpu;
  for (int i = 0; i < reps; ++i) {
    double c0 = cpu_now_ms();
    auto t0 = std::chrono::steady_clock::now();
    fn();
    ts.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    cpu.push_back(cpu_now_ms() - c0);
  }
  g_min = *std::min_element(ts.begin(), ts.end());
  g_cpu = median_ms(cpu);
  return median_ms(ts);
}
}  // namespace

int main(int argc, char** argv) {
  int threads = 0, reps = 30;
  bool step_loop = false;
  std::string shapes = "64,28,28,128;256,28,28,128;64,32,256,256";
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--shapes") && i + 1 < argc) shapes = argv[++i];
    if (!std::strcmp(argv[i], "--threads") && i + 1 < argc) threads = std::atoi(argv[++i]);
    if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) reps = std::atoi(argv[++i]);
    if (!std::strcmp(argv[i], "--step-loop")) step_loop = true;
  }
  if (threads > 0) set_num_threads(threads);
  if (step_loop) {
    kernels::lstm_sequence_forward.set(DeviceType::CPU, nullptr);
    kernels::lstm_sequence_backward.set(DeviceType::CPU, nullptr);
  }
  struct S {
    int64_t B, T, I, H;
  };
  std::vector<S> list;
  for (size_t at = 0; at < shapes.size();) {
    size_t end = shapes.find(';', at);
    if (end == std::string::npos) end = shapes.size();
    S s{};
    std::sscanf(shapes.substr(at, end - at).c_str(), "%ld,%ld,%ld,%ld", &s.B, &s.T, &s.I, &s.H);
    list.push_back(s);
    at = end + 1;
  }
  for (S s : list) {
    Generator g(1);
    double k = 1.0 / std::sqrt(double(s.H));  // PyTorch's initialisation range
    auto u = [&](Shape sh) { return Tensor::uniform(sh, -k, k, DType::F32, Device::cpu(), &g); };
    Tensor w_ih = u({4 * s.H, s.I}), w_hh = u({4 * s.H, s.H}), b_ih = u({4 * s.H}),
           b_hh = u({4 * s.H});
    Tensor x = Tensor::normal({s.B, s.T, s.I}, 0, 1, DType::F32, Device::cpu(), &g);
    Tensor gout = Tensor::normal({s.B, s.T, s.H}, 0, 1, DType::F32, Device::cpu(), &g);
    for (Tensor* t : {&w_ih, &w_hh, &b_ih, &b_hh, &x}) t->set_requires_grad(true);
    double fb = time_ms(reps, [&] {
      LstmResult r = lstm_layer(x, Tensor(), Tensor(), w_ih, w_hh, b_ih, b_hh);
      r.output.backward(gout);
    });
    double fb_min = g_min, fb_cpu = g_cpu;
    x.set_requires_grad(false);
    double fb_nox = time_ms(reps, [&] {
      LstmResult r = lstm_layer(x, Tensor(), Tensor(), w_ih, w_hh, b_ih, b_hh);
      r.output.backward(gout);
    });
    double fb_nox_min = g_min, fb_nox_cpu = g_cpu;
    double f = time_ms(reps, [&] {
      NoGradGuard ng;
      lstm_layer(x, Tensor(), Tensor(), w_ih, w_hh, b_ih, b_hh);
    });
    double f_min = g_min, f_cpu = g_cpu;
    double flop = 2.0 * s.B * s.T * 4 * s.H * (s.I + s.H);
    fmt::print(
        "{{\"impl\": \"freight\", \"threads\": {}, \"step_loop\": {}, \"B\": {}, \"T\": {}, "
        "\"I\": {}, \"H\": {}, \"fwd_bwd_ms\": {:.3f}, \"fwd_bwd_x_nograd_ms\": {:.3f}, "
        "\"fwd_nograd_ms\": {:.3f}, \"min_ms\": [{:.3f}, {:.3f}, {:.3f}], \"cpu_ms\": [{:.3f}, "
        "{:.3f}, {:.3f}], \"fwd_gflops\": {:.1f}, "
        "\"fwd_bwd_gflops\": {:.1f}}}\n",
        num_threads(), step_loop, s.B, s.T, s.I, s.H, fb, fb_nox, f, fb_min, fb_nox_min, f_min,
        fb_cpu, fb_nox_cpu, f_cpu, flop / f * 1e-6, 3 * flop / fb * 1e-6);
  }
}
