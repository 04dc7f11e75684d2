// The GEMM lab, CUDA side: the GPU version of the CPU ladder. Three kernels of our own
// (gemm_kernels.cu: naive, shared-memory tiles, register tiles) against cuBLAS, in float32, and
// cuBLAS on the tensor cores (TF32 and BF16 inputs, float32 accumulation) for scale. Each result
// is checked against the float64 host reference before it is timed (cudaEvent, median).
//
//   build/bench/gemm/freight_gemm_lab_cuda --out gemm-lab      # needs a GPU; skips without one
//
// The kernels were checked on the CPU emulation of CUDA (bench/gemm/emulation/run.sh).
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>

#include "gemm_check.h"
#include "gemm_cublas.h"
#include "gemm_kernels.h"
#include "report.h"

using namespace gemm_lab;

namespace {

// One check for every CUDA-family status: a failure throws, naming the call and the place.
void check_status(cudaError_t s, const char* call, const char* file, int line) {
  if (s != cudaSuccess)
    throw std::runtime_error(std::string(call) + " failed at " + file + ":" + std::to_string(line) +
                             ": " + cudaGetErrorName(s) + " (" + cudaGetErrorString(s) + ")");
}
void check_status(cublasStatus_t s, const char* call, const char* file, int line) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string(call) + " failed at " + file + ":" + std::to_string(line) +
                             ": " + cublasGetStatusString(s));
}
#define LAB_CHECK(call) check_status((call), #call, __FILE__, __LINE__)

template <class T>
struct DeviceBuffer {
  T* ptr = nullptr;
  explicit DeviceBuffer(size_t count) {
    LAB_CHECK(cudaMalloc(&ptr, std::max<size_t>(count, 1) * sizeof(T)));
  }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

// FP32 lanes per SM by compute capability (NVIDIA's CUDA C Programming Guide, "Arithmetic
// Instructions"): 64 on Volta, Turing and the A100, 128 on the other Ampere chips, Ada,
// Hopper and Blackwell.
int fp32_lanes_per_sm(int major, int minor) {
  if (major <= 7) return 64;
  if (major == 8 && minor == 0) return 64;
  return 128;
}

struct Gpu {
  std::string name;
  int sms = 0, major = 0, minor = 0, clock_khz = 0;
  size_t memory = 0;
  double fp32_peak_gflops() const {
    return double(sms) * fp32_lanes_per_sm(major, minor) * 2.0 * clock_khz * 1e-6;
  }
};

Shape parse_shape(const std::string& text) {
  long long m = 0, n = 0, k = 0;
  char tail = 0;
  if (std::sscanf(text.c_str(), "%lldx%lldx%lld%c", &m, &n, &k, &tail) != 3 || m <= 0 || n <= 0 ||
      k <= 0)
    throw CLI::ValidationError("--shapes",
                               "expected MxNxK with positive sizes, got '" + text + "'");
  return Shape{m, n, k};
}

// A GPU variant: enqueues one C = A·B on the stream.
struct Variant {
  std::string name;
  bool library = false;
  double input_roundoff = 0;  // of the inputs as the arithmetic sees them (gemm_cublas.h)
  std::function<void(const float*, const float*, float*, Shape)> run;
};

}  // namespace

int main(int argc, char** argv) {
  std::string out_dir = "gemm-lab";
  std::vector<int64_t> sizes = {256, 512, 1024, 2048, 4096, 8192};
  std::vector<std::string> shape_texts = {"64x512x784", "784x512x64", "64x576x288",
                                          "4096x4096x1024"};
  double budget = 1.0;
  int max_reps = 25;
  bool plot = true;
  CLI::App app{"GEMM lab (CUDA): naive, shared-memory and register-tiled kernels against cuBLAS"};
  app.add_option("--out", out_dir, "directory for gemm-cuda.md, .png, .svg");
  app.add_option("--sizes", sizes, "square sizes n")->delimiter(',');
  app.add_option("--shapes", shape_texts, "other shapes, MxNxK")->delimiter(',');
  app.add_option("--budget", budget, "seconds of timed runs per measurement");
  app.add_option("--max-reps", max_reps, "at most this many timed runs per measurement");
  app.add_flag("!--no-plot", plot, "skip gnuplot");
  CLI11_PARSE(app, argc, argv);

  std::vector<Shape> shapes;
  for (int64_t n : sizes) shapes.push_back(Shape{n, n, n});
  try {
    for (const std::string& t : shape_texts) shapes.push_back(parse_shape(t));
  } catch (const CLI::Error& e) {
    return app.exit(e);
  }
  for (const Shape& s : shapes)
    if (s.m > INT32_MAX || s.n > INT32_MAX || s.k > INT32_MAX) {
      std::fprintf(stderr, "freight_gemm_lab_cuda: %s is too large for int sizes\n",
                   shape_label(s).c_str());
      return 2;
    }

  // Without a usable GPU, say why and succeed: the lab is built everywhere, runs where it can.
  // (On a machine without a driver cudaGetDeviceCount returns an error, not zero.)
  int count = 0;
  const cudaError_t probe = cudaGetDeviceCount(&count);
  if (probe != cudaSuccess || count == 0) {
    std::printf("freight_gemm_lab_cuda: skipped: no usable GPU (%s)\n",
                probe != cudaSuccess ? cudaGetErrorString(probe) : "no CUDA device found");
    return 0;
  }

  try {
    Gpu gpu;
    cudaDeviceProp prop{};
    LAB_CHECK(cudaGetDeviceProperties(&prop, 0));
    gpu.name = prop.name;
    gpu.sms = prop.multiProcessorCount;
    gpu.major = prop.major;
    gpu.minor = prop.minor;
    gpu.memory = prop.totalGlobalMem;
    LAB_CHECK(cudaDeviceGetAttribute(&gpu.clock_khz, cudaDevAttrClockRate, 0));
    char peak_text[400];
    std::snprintf(peak_text, sizeof peak_text,
                  "FP32 peak: %d SMs x %d FP32 lanes x 2 flops x %.3f GHz (boost clock) = %.1f "
                  "TFLOP/s",
                  gpu.sms, fp32_lanes_per_sm(gpu.major, gpu.minor), gpu.clock_khz * 1e-6,
                  gpu.fp32_peak_gflops() * 1e-3);
    std::printf("%s (compute capability %d.%d), %.1f GiB\n%s\n", gpu.name.c_str(), gpu.major,
                gpu.minor, double(gpu.memory) / (1 << 30), peak_text);

    cudaStream_t stream;
    LAB_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cublasHandle_t handle;
    LAB_CHECK(cublasCreate(&handle));
    LAB_CHECK(cublasSetStream(handle, stream));
    LAB_CHECK(cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH));  // FP32 SGEMM: no TF32
    cudaEvent_t start, stop;
    LAB_CHECK(cudaEventCreate(&start));
    LAB_CHECK(cudaEventCreate(&stop));

    // BF16 copies of the operands, refreshed once per shape (the conversion is not timed).
    std::unique_ptr<DeviceBuffer<__nv_bfloat16>> a16, b16;
    std::vector<Variant> variants = {
        {"(1) naive, one thread per element", false, 0,
         [&](const float* a, const float* b, float* c, Shape s) {
           cuda::gemm_naive(a, b, c, int(s.m), int(s.n), int(s.k), stream);
         }},
        {"(2) shared-memory tiles 32x32", false, 0,
         [&](const float* a, const float* b, float* c, Shape s) {
           cuda::gemm_smem_tiled(a, b, c, int(s.m), int(s.n), int(s.k), stream);
         }},
        {"(3) register tiles 8x8 per thread", false, 0,
         [&](const float* a, const float* b, float* c, Shape s) {
           cuda::gemm_register_tiled(a, b, c, int(s.m), int(s.n), int(s.k), stream);
         }},
        {"(4) cuBLAS SGEMM (FP32)", true, 0,
         [&](const float* a, const float* b, float* c, Shape s) {
           LAB_CHECK(cuda::cublas_gemm(handle, cuda::CublasMode::kFp32, a, b, c, int(s.m), int(s.n),
                                       int(s.k)));
         }},
        {"(5) cuBLAS TF32 tensor cores", false, cuda::input_roundoff(cuda::CublasMode::kTf32),
         [&](const float* a, const float* b, float* c, Shape s) {
           LAB_CHECK(cuda::cublas_gemm(handle, cuda::CublasMode::kTf32, a, b, c, int(s.m), int(s.n),
                                       int(s.k)));
         }},
        {"(6) cuBLAS BF16 tensor cores", false, cuda::input_roundoff(cuda::CublasMode::kBf16),
         [&](const float*, const float*, float* c, Shape s) {
           LAB_CHECK(cuda::cublas_gemm(handle, cuda::CublasMode::kBf16, a16->ptr, b16->ptr, c,
                                       int(s.m), int(s.n), int(s.k)));
         }},
    };

    Results results;
    results.shapes = shapes;
    for (const Variant& v : variants)
      results.series.push_back({v.name, 1, v.library, std::vector<Cell>(shapes.size()), ""});
    bool any_wrong = false;

    for (size_t si = 0; si < shapes.size(); ++si) {
      const Shape& s = shapes[si];
      std::vector<float> a(size_t(s.m * s.k)), b(size_t(s.k * s.n)), c(size_t(s.m * s.n));
      fill_uniform(a, 1000 + si);
      fill_uniform(b, 2000 + si);
      const Reference ref(a.data(), b.data(), s);
      DeviceBuffer<float> da(a.size()), db(b.size()), dc(c.size());
      LAB_CHECK(cudaMemcpy(da.ptr, a.data(), a.size() * sizeof(float), cudaMemcpyHostToDevice));
      LAB_CHECK(cudaMemcpy(db.ptr, b.data(), b.size() * sizeof(float), cudaMemcpyHostToDevice));
      a16 = std::make_unique<DeviceBuffer<__nv_bfloat16>>(a.size());
      b16 = std::make_unique<DeviceBuffer<__nv_bfloat16>>(b.size());
      cuda::to_bf16(da.ptr, a16->ptr, int64_t(a.size()), stream);
      LAB_CHECK(cudaGetLastError());
      cuda::to_bf16(db.ptr, b16->ptr, int64_t(b.size()), stream);
      LAB_CHECK(cudaGetLastError());
      std::printf("\n%s (m %lld, n %lld, k %lld): %.3g GFLOP, reference checks %s\n",
                  shape_label(s).c_str(), (long long)s.m, (long long)s.n, (long long)s.k,
                  s.flops() * 1e-9, ref.coverage().c_str());
      for (size_t vi = 0; vi < variants.size(); ++vi) {
        const Variant& v = variants[vi];
        auto launch = [&] {
          v.run(da.ptr, db.ptr, dc.ptr, s);
          LAB_CHECK(cudaGetLastError());
        };
        // Validate first: C starts as NaN, so an element the kernel never writes fails.
        LAB_CHECK(cudaMemsetAsync(dc.ptr, 0xff, c.size() * sizeof(float), stream));
        launch();
        LAB_CHECK(cudaMemcpyAsync(c.data(), dc.ptr, c.size() * sizeof(float),
                                  cudaMemcpyDeviceToHost, stream));
        LAB_CHECK(cudaStreamSynchronize(stream));
        const CheckResult r = ref.check(c.data(), error_bound(s.k, v.input_roundoff));
        if (!r.ok()) {
          any_wrong = true;
          results.series[vi].cells[si].note = "WRONG";
          std::printf("  %-36s WRONG: %s\n", v.name.c_str(), r.describe().c_str());
          continue;
        }
        // Then time: one warm-up, then runs each between two events, until the budget is spent.
        launch();
        std::vector<double> seconds;
        double spent = 0;
        while (int(seconds.size()) < max_reps && (seconds.size() < 5 || spent < budget)) {
          LAB_CHECK(cudaEventRecord(start, stream));
          launch();
          LAB_CHECK(cudaEventRecord(stop, stream));
          LAB_CHECK(cudaEventSynchronize(stop));
          float ms = 0;
          LAB_CHECK(cudaEventElapsedTime(&ms, start, stop));
          seconds.push_back(ms * 1e-3);
          spent += ms * 1e-3;
        }
        const Timing t = summarize(seconds);
        results.series[vi].cells[si].gflops = s.flops() / t.median_s * 1e-9;
        std::printf("  %-36s %9.1f GFLOP/s  median of %2d runs, %9.3f ms; %s\n", v.name.c_str(),
                    results.series[vi].cells[si].gflops, t.reps, t.median_s * 1e3,
                    r.describe().c_str());
        std::fflush(stdout);
      }
    }

    std::filesystem::create_directories(out_dir);
    std::ostringstream md;
    int runtime = 0, cublas = 0;
    cudaRuntimeGetVersion(&runtime);
    cublasGetVersion(handle, &cublas);
    md << "# GEMM lab: CUDA results\n\n"
       << "C = A·B (bench/gemm, explained in docs/gemm-lab.md). Produced by "
          "`freight_gemm_lab_cuda`.\n\n"
       << "- GPU: " << gpu.name << " (compute capability " << gpu.major << "." << gpu.minor << "), "
       << gpu.sms << " SMs, " << (gpu.memory >> 30) << " GiB\n"
       << "- " << peak_text << "\n"
       << "- CUDA runtime " << runtime / 1000 << "." << runtime % 1000 / 10 << ", cuBLAS " << cublas
       << "\n\n"
       << "## GFLOP/s\n\n"
       << "Median of at least 5 runs timed with CUDA events after a warm-up. In parentheses: the "
          "fraction of cuBLAS SGEMM (FP32). The tensor-core rows round the inputs to TF32 or "
          "BF16 (the BF16 conversion is not timed) and accumulate in FP32; they are validated "
          "with the error bound widened by the input rounding.\n\n"
       << markdown_table(results) << "\n"
       << "## Fraction of the FP32 peak\n\n"
       << markdown_peak_table(results, [&](int) { return gpu.fp32_peak_gflops(); })
       << "\n(The tensor-core rows are shown against the FP32 peak too: they are not bound by "
          "it.)\n\n"
       << "![GFLOP/s against n](gemm-cuda.png)\n";
    {
      std::ofstream f(out_dir + "/gemm-cuda.md");
      f << md.str();
    }
    std::printf("\n%s", md.str().c_str());
    if (plot)
      write_plot(results, out_dir, "gemm-cuda", "GEMM lab, CUDA: " + gpu.name,
                 {{"FP32 peak", gpu.fp32_peak_gflops()}});
    cublasDestroy(handle);
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    cudaStreamDestroy(stream);
    return any_wrong ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "freight_gemm_lab_cuda: error: %s\n", e.what());
    return 1;
  }
}
