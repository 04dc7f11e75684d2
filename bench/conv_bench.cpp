// Standalone timing of conv2d forward and forward+backward on the shapes of small CNNs
// (LeNet-5, PyTorch's MNIST example, a Fashion-MNIST CNN, ResNet-56 and AlexNet on CIFAR). Build by
// hand:
//   g++ -O2 -std=c++20 bench/conv_bench.cpp -Iinclude -Lbuild -lfreight -lfmt \
//       -Wl,-rpath,$PWD/build -o /tmp/conv_bench
//   OMP_NUM_THREADS=2 /tmp/conv_bench [batch] [shape name]
// Prints medians of 7 timed rounds; GFLOP/s counts 2·MACs of the forward, and the backward as
// twice that when the input needs a gradient (dx and dW), once when it does not (dW only).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "freight/freight.h"

using namespace freight;

struct Shape4 {
  const char* name;
  int64_t c, h, w, o, k, s, p;
  bool input_grad;
};

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int main(int argc, char** argv) {
  int64_t n = argc > 1 ? std::atoll(argv[1]) : 64;
  const char* filter = argc > 2 ? argv[2] : "";
  std::vector<Shape4> shapes = {
      {"lenet_c1", 1, 28, 28, 6, 5, 1, 2, false},   {"lenet_c2", 6, 14, 14, 16, 5, 1, 0, true},
      {"mnist_c1", 1, 28, 28, 32, 3, 1, 0, false},  {"mnist_c2", 32, 26, 26, 64, 3, 1, 0, true},
      {"fmnist_c1", 1, 28, 28, 32, 3, 1, 1, false}, {"fmnist_c2", 32, 14, 14, 64, 3, 1, 1, true},
      {"res_16", 16, 32, 32, 16, 3, 1, 1, true},    {"res_32", 32, 16, 16, 32, 3, 1, 1, true},
      {"res_64", 64, 8, 8, 64, 3, 1, 1, true},      {"res_s2", 16, 32, 32, 32, 3, 2, 1, true},
      {"res_1x1s2", 16, 32, 32, 32, 1, 2, 0, true}, {"alex_c1", 3, 32, 32, 32, 5, 1, 2, false},
      {"alex_c2", 32, 16, 16, 32, 5, 1, 2, true},   {"alex_c3", 32, 8, 8, 64, 5, 1, 2, true},
  };
  std::printf("%s\n", build_info().c_str());
  for (const Shape4& s : shapes) {
    if (*filter && std::strcmp(s.name, filter) != 0) continue;
    Generator gen(1);
    Tensor x = Tensor::normal({n, s.c, s.h, s.w}, 0, 1, DType::F32, Device::cpu(), &gen);
    Tensor w = Tensor::normal({s.o, s.c, s.k, s.k}, 0, 0.1, DType::F32, Device::cpu(), &gen);
    Tensor b = Tensor::normal({s.o}, 0, 1, DType::F32, Device::cpu(), &gen);
    if (s.input_grad) x.set_requires_grad();
    w.set_requires_grad();
    b.set_requires_grad();
    Tensor y0 = conv2d(x, w, b, {s.s, s.s}, {s.p, s.p});
    Tensor gy = Tensor::normal(y0.shape(), 0, 1, DType::F32, Device::cpu(), &gen);
    y0 = Tensor();
    double fl = 2.0 * double(n * s.o * gy.size(2) * gy.size(3)) * double(s.c * s.k * s.k);
    double total = fl * (s.input_grad ? 3 : 2);
    auto step = [&] {
      Tensor y = conv2d(x, w, b, {s.s, s.s}, {s.p, s.p});
      y.backward(gy);
      x.zero_grad(), w.zero_grad(), b.zero_grad();
    };
    auto fwd = [&] {
      NoGradGuard ng;
      Tensor y = conv2d(x, w, b, {s.s, s.s}, {s.p, s.p});
    };
    for (int i = 0; i < 3; ++i) step();
    int reps = std::max(3, int(1e9 / total));
    std::vector<double> tf, tt;
    for (int r = 0; r < 7; ++r) {
      double t0 = now();
      for (int i = 0; i < reps; ++i) fwd();
      double t1 = now();
      for (int i = 0; i < reps; ++i) step();
      double t2 = now();
      tf.push_back((t1 - t0) / reps);
      tt.push_back((t2 - t1) / reps);
    }
    std::sort(tf.begin(), tf.end());
    std::sort(tt.begin(), tt.end());
    double mf = tf[3], mt = tt[3];
    std::printf("%-10s fwd %7.3f ms %6.1f GF/s   fwd+bwd %7.3f ms %6.1f GF/s\n", s.name, mf * 1e3,
                fl / mf / 1e9, mt * 1e3, total / mt / 1e9);
  }
}
