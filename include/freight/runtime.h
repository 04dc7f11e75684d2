// Process-wide runtime settings: CPU threads, memory statistics, debug poisoning, the GPU's
// numerics (precision, determinism) and pinned host memory.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "freight/device.h"
#include "freight/tensor.h"

namespace freight {

// Threads used by CPU kernels and by the BLAS (one shared OpenMP pool, so they never compete).
void set_num_threads(int n);
int num_threads();
// Runs fn on the calling thread and on every thread of the CPU pool (each runs it once): for
// per-thread state such as a signal mask. Call it from the program's main thread.
void on_every_cpu_thread(void (*fn)());

// On a GPU, blocks reserved for a CUDA graph (its private pool, which a replay uses whatever the
// host holds) count as in use for as long as the graph lives, so the peak is the device's.
struct MemoryStats {
  size_t in_use = 0;  // bytes held by live tensors (and reserved for CUDA graphs)
  size_t peak = 0;    // high-water mark of in_use since the last reset
  size_t cached = 0;  // bytes kept by the caching allocator for reuse
  size_t allocs = 0;  // allocations served
  size_t fresh = 0;   // allocations that had to ask the system (cache misses)
};
MemoryStats memory_stats(Device device);
void reset_peak_memory(Device device);
void empty_cache(Device device);  // returns cached blocks to the system

// When on, every new allocation is filled with a NaN pattern before use, so an element a kernel
// forgot to write shows up as NaN in tests. Off by default (it costs a memset).
void set_poison_allocations(bool on);
bool poison_allocations();

// Blocks until all work queued on `device` has finished (a no-op on the CPU).
void synchronize(Device device);

// What a device is: for the CPU its model, cores and memory; for a GPU its name, memory, number
// of multiprocessors, compute capability and the driver and runtime versions.
struct DeviceInfo {
  Device device;
  std::string name;
  size_t memory_total = 0;         // bytes
  size_t memory_free = 0;          // bytes (GPU: free now; CPU: available now)
  int compute_units = 0;           // CPU: hardware threads; GPU: streaming multiprocessors
  std::string compute_capability;  // GPU: "9.0"
  std::string driver_version;      // GPU: "13.0"
  std::string runtime_version;     // GPU: CUDA runtime
  std::string details;             // CPU: BLAS and its kernels; GPU: clock, bus width, ...
};
// The CPU first, then every visible GPU (none when the CUDA backend is absent or unusable).
std::vector<DeviceInfo> list_devices();

// ---- GPU numerics ----
// How float32 matrix products and convolutions run on a GPU. The CPU always computes in full
// float32 (OpenBLAS has no reduced-precision mode), so the CPU accepts only FP32.
//   FP32  full float32 arithmetic: cuBLAS CUBLAS_DEFAULT_MATH; cuDNN CUDNN_FMA_MATH (cuDNN's
//         default math type would allow TF32 on Ampere and later).
//   TF32  float32 tensors, but GEMM and convolution inputs are rounded to TF32 (10-bit
//         mantissa) on the tensor cores, with float32 accumulation: cuBLAS
//         CUBLAS_TF32_TENSOR_OP_MATH; cuDNN CUDNN_TENSOR_OP_MATH.
//   BF16  GEMM inputs converted to bfloat16 for the tensor cores, float32
//         accumulation and float32 outputs (cublasGemmEx with CUDA_R_16BF inputs,
//         CUBLAS_COMPUTE_32F; convolutions for now run as under TF32, float32 data with
//         CUDNN_TENSOR_OP_MATH, bfloat16 descriptors not done yet). Parameters
//         (the master weights), gradients, optimizer state, activations between layers and the
//         loss stay float32.
// Float64 work is never affected. Read by the CUDA GEMM (blas.cu) and convolution code at each
// call, so a change takes effect at once.
enum class Precision : uint8_t { FP32, TF32, BF16 };
void set_precision(Precision p);
Precision precision();
const char* precision_name(Precision p);           // "fp32", "tf32", "bf16"
Precision parse_precision(std::string_view text);  // throws naming the accepted values

// Deterministic GPU results: the same inputs give bit-identical outputs run to run on the same
// GPU and build. Freight's own kernels always are (fixed-order reductions, no floating-point
// atomics); cuBLAS is for a fixed stream and workspace, which Freight keeps. When on, the
// convolution code picks deterministic cuDNN algorithms only (no atomics-based backward
// algorithms, no timing-based choice), chosen from the next call on (the mode is part of the
// cached convolution plan's key). The CPU kernels are deterministic already. Off by default.
void set_deterministic(bool on);
bool deterministic();

// ---- pinned host memory ----
// Page-locked host memory, which a GPU reads by DMA without a staging copy (so host-to-device
// copies can overlap compute). Served from a cache like device memory (cudaHostAlloc is slow);
// a block freed while a copy from it is still queued is only reused once that copy has run.
// `gpu` names the CUDA device whose context allocates it (the memory is usable by every GPU);
// it is never silently pageable: without a usable GPU this throws.
Tensor empty_pinned(const Shape& shape, DType dtype, Device gpu);
// The loader's host_alloc hook for batches bound for `gpu` (LoaderOptions::host_alloc).
std::function<Tensor(const Shape&, DType)> pinned_host_allocator(Device gpu);
bool is_pinned(const Tensor& t);

// ---- CPU kernels ----
// The CPU kernels are built for several instruction-set levels and one is loaded at the first CPU
// kernel call: the best this CPU runs, or the one FREIGHT_CPU_ISA names (an unknown level, or one
// this CPU cannot run, is an error). On x86-64 the levels are "avx2" (x86-64-v3) and "avx512"
// (x86-64-v4); elsewhere "generic"; "built-in" when the build compiled them into the library
// (-DFREIGHT_NATIVE=ON). These load the kernels if they are not loaded yet (and throw as that
// does).
std::string cpu_kernel_isa();         // the level in use
std::string cpu_kernel_isa_reason();  // why: "the best this CPU runs", "FREIGHT_CPU_ISA=avx2"
// The levels this build has and this CPU runs, lowest first (what FREIGHT_CPU_ISA may name).
std::vector<std::string> cpu_isas_supported();

// Versions of the libraries in use (BLAS, its core type, CUDA runtime...), for benchmark records.
std::string build_info();

}  // namespace freight
