// Peaks of an NVIDIA GPU for `freight devices --measure` (see freight/peaks.h; the slot is in
// core/hardware_peaks.h): cuBLAS GEMM in float32 (full FP32 arithmetic), float32 with TF32
// tensor cores, and bfloat16 with float32 accumulation; device memory bandwidth from a large
// device-to-device copy; host<->device bandwidth from pinned and pageable buffers; the cost of
// one empty kernel launch.
//
// Everything runs on a stream and a cuBLAS handle of its own (so the engine's handle keeps its
// math mode), GEMM and on-device copies are timed with CUDA events, transfers and launches with
// the host clock around a stream synchronisation (that is what a caller waits). Each figure is
// the median of repeats after a warm-up run. All buffers are RAII-owned, so an error thrown by a
// check leaks nothing.
#include <cuda_bf16.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_context.h"
#include "core/hardware_peaks.h"

namespace freight::cuda {
namespace {

__global__ void empty_kernel() {}

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

struct Stream {
  cudaStream_t s = nullptr;
  Stream() { FREIGHT_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); }
  ~Stream() { (void)cudaStreamDestroy(s); }
};
struct Event {
  cudaEvent_t e = nullptr;
  Event() { FREIGHT_CUDA_CHECK(cudaEventCreate(&e)); }
  ~Event() { (void)cudaEventDestroy(e); }
};
struct Blas {
  cublasHandle_t h = nullptr;
  explicit Blas(cudaStream_t s) {
    FREIGHT_CUDA_CHECK(cublasCreate(&h));
    FREIGHT_CUDA_CHECK(cublasSetStream(h, s));
  }
  ~Blas() { (void)cublasDestroy(h); }
};
struct DeviceBuffer {
  void* p = nullptr;
  // Filled on `s`, the stream that times the work reading it: a plain cudaMemset would go to the
  // legacy default stream, which a non-blocking stream does not wait for.
  DeviceBuffer(size_t bytes, cudaStream_t s) {
    FREIGHT_CUDA_CHECK(cudaMalloc(&p, bytes));
    // A normal, finite bit pattern in every dtype used here (0x3C3C3C3C ≈ 0.0115 as float32,
    // 0x3C3C ≈ 0.0115 as bfloat16): no NaNs, no denormals.
    FREIGHT_CUDA_CHECK(cudaMemsetAsync(p, 0x3C, bytes, s));
  }
  ~DeviceBuffer() { (void)cudaFree(p); }
};
struct PinnedBuffer {
  void* p = nullptr;
  explicit PinnedBuffer(size_t bytes) {
    FREIGHT_CUDA_CHECK(cudaHostAlloc(&p, bytes, cudaHostAllocDefault));
    std::memset(p, 1, bytes);
  }
  ~PinnedBuffer() { (void)cudaFreeHost(p); }
};

// Median seconds per call of `fn` (which enqueues work on `s`), `inner` calls per repeat, timed
// with events around the calls; every repeat's figure lands in `all` when given.
template <class Fn>
double event_seconds(cudaStream_t s, int repeats, int inner, Fn&& fn,
                     std::vector<double>* all = nullptr) {
  Event start, stop;
  fn();  // warm-up: library heuristics, first-touch of the buffers
  FREIGHT_CUDA_CHECK(cudaStreamSynchronize(s));
  std::vector<double> t;
  for (int r = 0; r < repeats; ++r) {
    FREIGHT_CUDA_CHECK(cudaEventRecord(start.e, s));
    for (int i = 0; i < inner; ++i) fn();
    FREIGHT_CUDA_CHECK(cudaEventRecord(stop.e, s));
    FREIGHT_CUDA_CHECK(cudaEventSynchronize(stop.e));
    float ms = 0;
    FREIGHT_CUDA_CHECK(cudaEventElapsedTime(&ms, start.e, stop.e));
    t.push_back(double(ms) * 1e-3 / inner);
  }
  if (all) *all = t;
  return timing_stats::median(t);
}

// Median seconds per call of `fn` measured on the host clock up to the end of the stream's work.
template <class Fn>
double host_seconds(cudaStream_t s, int repeats, int inner, Fn&& fn) {
  fn();
  FREIGHT_CUDA_CHECK(cudaStreamSynchronize(s));
  std::vector<double> t;
  for (int r = 0; r < repeats; ++r) {
    auto t0 = Clock::now();
    for (int i = 0; i < inner; ++i) fn();
    FREIGHT_CUDA_CHECK(cudaStreamSynchronize(s));
    t.push_back(since(t0) / inner);
  }
  return timing_stats::median(t);
}

// Seconds of one float32 n x n GEMM under the handle's current math mode.
double sgemm_seconds(Blas& blas, cudaStream_t s, int n, const DeviceBuffer& a,
                     const DeviceBuffer& b, DeviceBuffer& c, int repeats, int inner,
                     std::vector<double>* all = nullptr) {
  const float alpha = 1.0f, beta = 0.0f;
  auto call = [&] {
    FREIGHT_CUDA_CHECK(cublasSgemm(
        blas.h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, static_cast<const float*>(a.p), n,
        static_cast<const float*>(b.p), n, &beta, static_cast<float*>(c.p), n));
  };
  return event_seconds(s, repeats, inner, call, all);
}

void measure_cuda(int index, HardwarePeaks& p) {
  set_device(index);
  Stream stream;
  cudaStream_t s = stream.s;
  size_t free_b = 0, total_b = 0;
  FREIGHT_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  p.threads = 0;

  // ---- GEMM: 8192³ is 1.1 TFLOP, tens of milliseconds even on an H100 ----
  int n = free_b > (size_t(4) << 30) ? 8192 : 4096;
  size_t mat = size_t(n) * size_t(n) * sizeof(float);
  {
    DeviceBuffer a(mat, s), b(mat, s), c(mat, s);
    Blas blas(s);
    FREIGHT_CUDA_CHECK(cublasSetMathMode(blas.h, CUBLAS_DEFAULT_MATH));  // FP32, no TF32
    std::vector<double> runs;
    double t = sgemm_seconds(blas, s, n, a, b, c, 5, 3, &runs);
    double flop = 2.0 * std::pow(double(n), 3);
    p.gemm_n = n;
    p.fp32_flops = flop / t;
    p.spread = timing_stats::spread(runs);

    // Small GEMMs for the overhead term of the time model t(F) = t0 + F / peak.
    std::vector<double> f, sec;
    for (int m : {64, 128, 256, 512, 1024}) {
      double fl = 2.0 * std::pow(double(m), 3);
      f.push_back(fl);
      sec.push_back(sgemm_seconds(blas, s, m, a, b, c, 5, 20));
    }
    p.gemm_overhead_s = timing_stats::fit_overhead(f, sec, p.fp32_flops);

    FREIGHT_CUDA_CHECK(cublasSetMathMode(blas.h, CUBLAS_TF32_TENSOR_OP_MATH));
    p.tf32_flops = flop / sgemm_seconds(blas, s, n, a, b, c, 5, 3);
    FREIGHT_CUDA_CHECK(cublasSetMathMode(blas.h, CUBLAS_DEFAULT_MATH));

    // bfloat16 inputs and output, float32 accumulation (the buffers are large enough: half the
    // bytes of the float32 matrices).
    const float alpha = 1.0f, beta = 0.0f;
    double t16 = event_seconds(s, 5, 3, [&] {
      FREIGHT_CUDA_CHECK(cublasGemmEx(blas.h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a.p,
                                      CUDA_R_16BF, n, b.p, CUDA_R_16BF, n, &beta, c.p, CUDA_R_16BF,
                                      n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    });
    p.bf16_flops = flop / t16;
  }

  // ---- device memory: a copy of up to 1 GiB each way (reads plus writes counted) ----
  size_t mem_copy_bytes = std::min(size_t(1) << 30, free_b / 8);
  {
    size_t bytes = mem_copy_bytes;
    DeviceBuffer src(bytes, s), dst(bytes, s);
    double t = event_seconds(s, 7, 2, [&] {
      FREIGHT_CUDA_CHECK(cudaMemcpyAsync(dst.p, src.p, bytes, cudaMemcpyDeviceToDevice, s));
    });
    p.mem_bandwidth = 2.0 * double(bytes) / t;
  }
  // ---- L2: a copy whose two buffers fill half of it ----
  {
    cudaDeviceProp prop{};
    FREIGHT_CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
    size_t bytes = std::max<size_t>(size_t(prop.l2CacheSize) / 4, size_t(1) << 16);
    DeviceBuffer src(bytes, s), dst(bytes, s);
    double t = event_seconds(s, 7, 50, [&] {
      FREIGHT_CUDA_CHECK(cudaMemcpyAsync(dst.p, src.p, bytes, cudaMemcpyDeviceToDevice, s));
    });
    p.levels.clear();
    p.levels.push_back({2.0 * double(bytes), 2.0 * double(bytes) / t});
    p.levels.push_back({2.0 * double(mem_copy_bytes), p.mem_bandwidth});
  }

  // ---- host <-> device: 256 MiB from pinned and from pageable host memory ----
  {
    size_t bytes = std::min(size_t(256) << 20, free_b / 8);
    DeviceBuffer dev(bytes, s);
    PinnedBuffer pinned(bytes);
    std::vector<char> pageable(bytes, 1);
    auto copy = [&](void* dst, const void* src, cudaMemcpyKind kind) {
      return host_seconds(s, 5, 1,
                          [&] { FREIGHT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, s)); });
    };
    p.h2d_pinned = double(bytes) / copy(dev.p, pinned.p, cudaMemcpyHostToDevice);
    p.d2h_pinned = double(bytes) / copy(pinned.p, dev.p, cudaMemcpyDeviceToHost);
    p.h2d_pageable = double(bytes) / copy(dev.p, pageable.data(), cudaMemcpyHostToDevice);
    p.d2h_pageable = double(bytes) / copy(pageable.data(), dev.p, cudaMemcpyDeviceToHost);
  }

  // ---- launch: empty kernels back to back, each checked as the engine checks its launches ----
  {
    constexpr int kLaunches = 2000;
    auto launches = [&] {
      for (int i = 0; i < kLaunches; ++i) {
        empty_kernel<<<1, 1, 0, s>>>();
        FREIGHT_CUDA_CHECK_LAUNCH();
      }
    };
    p.launch_s = host_seconds(s, 7, 1, launches) / kLaunches;
  }
}

}  // namespace

FREIGHT_REGISTER_KERNEL(kernels::measure_hardware_peaks, CUDA, measure_cuda);

}  // namespace freight::cuda
