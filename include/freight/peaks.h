// Measured peaks of a device: what `freight devices --measure` prints and what `freight explain`,
// `freight plan` and `freight bench` compare against ("fraction of peak", roofline bounds).
//
// Every figure is the median of repeated runs after a warm-up. On the CPU the runs are timed by the
// measuring thread's CPU clock, not the wall: on a shared machine other processes preempt runs,
// which stretches wall time but not CPU time (see src/profile/peaks_device.h); the spread of the
// GEMM runs and the host's load are recorded too. Results are
// cached in a JSON file keyed by the device's name and the build (BLAS, threads, CUDA), so later
// commands reuse them without measuring again:
//   $FREIGHT_PEAKS_FILE, else $XDG_CACHE_HOME/freight/peaks.json, else ~/.cache/freight/peaks.json
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "freight/device.h"
#include "freight/parallel_thresholds.h"

namespace freight {

struct DevicePeaks {
  Device device;
  std::string name;         // "Intel(R) Xeon(R) ...", "NVIDIA H100 80GB HBM3"
  std::string build;        // build_info() when measured (BLAS and its threads, CUDA backend)
  std::string key;          // cache key: device, name and build
  std::string measured_at;  // UTC, ISO 8601
  bool from_cache = false;  // true when peaks_for() found it in the cache file
  int threads = 0;          // CPU threads used (CPU); 0 on a GPU

  // ---- compute: FLOP/s, a multiply-add counted as 2 ----
  double fp32_flops = 0;  // float32 GEMM, square gemm_n x gemm_n (CPU: OpenBLAS on all threads,
                          // the best of n = 512, 1024, 2048; GPU: cuBLAS with full FP32
                          // arithmetic, no tensor cores)
  int64_t gemm_n = 0;
  double tf32_flops = 0;  // GPU: float32 GEMM allowed TF32 tensor cores; 0 = not measured
  double bf16_flops = 0;  // GPU: bfloat16 GEMM with float32 accumulation; 0 = not measured
  // GEMM time model t(F) = gemm_overhead_s + F / fp32_flops, fitted to small square GEMMs (what
  // small layers get: thread start-up and packing dominate tiny GEMMs).
  double gemm_overhead_s = 0;

  // ---- memory: bytes/s, reads plus writes (a copy of N bytes moves 2N) ----
  double mem_bandwidth = 0;  // device memory: a large copy (CPU: all threads; GPU: on device)
  // Bandwidth by working-set size, ascending: copies whose two buffers together hold `bytes`
  // (CPU: half of each core's L2, 16 MiB, 64 MiB, 256 MiB; GPU: half of L2, 2 GiB). Small
  // working sets stay in cache and move faster than memory: a layer's roof uses the level its
  // own bytes fit in (bandwidth_for). The last level is mem_bandwidth.
  struct Level {
    double bytes = 0, bandwidth = 0;
  };
  std::vector<Level> levels;
  // Host <-> device over the bus (GPU only; 0 on the CPU).
  double h2d_pinned = 0, h2d_pageable = 0, d2h_pinned = 0, d2h_pageable = 0;

  // ---- latency, seconds ----
  double launch_s = 0;    // GPU: one empty kernel, back to back; CPU: equal to op_s
  double op_s = 0;        // one tiny op through Freight (checks, allocation, kernel), no autograd
  double train_op_s = 0;  // one tiny op recorded on the tape: forward, its node, its backward

  // ---- Freight's own kernels on this device ----
  // The fraction of its roofline time (freight/plan.h: roofline_seconds) that a forward and
  // backward pass of a reference layer of each type reaches here, after its per-op costs:
  // "Linear", "Linear:wide", "Conv2d", "Conv2d:narrow", "Conv2d:3x3", "LSTM", "ReLU", ..., "loss",
  // "optimizer:sgd", "optimizer:adam" (freight/explain.h: LayerCost::kernel). The reference shapes
  // are fixed (src/profile/calibrate.cpp), never a model's own; freight plan divides its roofline
  // times by these fractions.
  std::map<std::string, double> efficiency;
  // 1 for a type not measured; a class ("Conv2d:3x3") not measured takes its type's figure.
  double efficiency_for(const std::string& type) const;

  // ---- CPU: the work per thread from which splitting a kernel over threads pays here ----
  // (freight/parallel_thresholds.h). Measured with `threads`; parallel_measured is false in a
  // cache written before Freight measured them, and on a GPU.
  ParallelThresholds parallel;
  bool parallel_measured = false;
  // No round of one of the measurement's ladders ran with every core free: another process held
  // one throughout, and splitting looked worse than it is. measure_peaks then keeps the thresholds
  // of the entry it replaces when those were measured with the cores free (parallel_measured_at
  // says when); else it records the contended figures but they are not put in force
  // (use_cached_parallel_thresholds). `freight devices --measure` on a quiet machine mends it.
  bool parallel_contended = false;
  std::string parallel_measured_at;  // UTC, ISO 8601: this measurement's, or the one kept

  double spread = 0;  // (slowest − fastest) / median of the GEMM runs: how noisy the machine was
  double load = 0;    // the host's 1-minute load average when measured (/proc/loadavg)

  // Ridge point of the roofline: the arithmetic intensity (FLOP/byte) above which fp32 compute,
  // not memory, bounds an op.
  double ridge() const { return mem_bandwidth > 0 ? fp32_flops / mem_bandwidth : 0; }
  // Roofline bound on the rate of an op of `intensity` FLOP/byte: min(peak, intensity × bw),
  // with the memory bandwidth, or the bandwidth of the cache level a working set of
  // `working_set` bytes fits in when given.
  double roof(double intensity, double working_set = 0) const;
  // The bandwidth of the smallest level that holds `working_set` bytes (mem_bandwidth when none
  // does, or when `working_set` is 0).
  double bandwidth_for(double working_set) const;
};

// Measures the peaks of `device` now (a few seconds) and stores them in the cache.
DevicePeaks measure_peaks(Device device);
// The cached peaks of `device` for this build, or measure_peaks(device) when there are none.
DevicePeaks peaks_for(Device device);

// How much slower the host runs work right now than when it is quiet: the wall time of short
// two-thread GEMMs over `seconds` divided by the CPU time the calling thread spent in them (1 on
// an idle machine; 3 when other processes leave this one a third of the CPU). explain and plan
// report it beside their figures.
double host_contention(double seconds = 0.3);

// Whether the CPU threads pass data to each other through a shared cache right now. A virtual
// machine's host decides where its vCPUs run and moves them: on a 2-vCPU AMD EPYC (Zen 4) the two
// shared an L3 part of the time and sat in different core complexes, each with an L3 of its own,
// the rest, switching every minute or so. Apart, every operand that one thread wrote and the
// other reads crosses between the complexes: a step split over the threads then pulls its
// tensors across several times, and a small one runs far slower than on one thread (the mlp at
// batch 1: about 1 ms on two threads against 0.16 ms on one; 0.13 ms on two when they shared).
struct CacheSharing {
  bool measured = false;         // false with fewer than two threads
  double own_bytes_per_s = 0;    // a thread reading back the block it just wrote
  double cross_bytes_per_s = 0;  // a thread reading the block the other thread just wrote
  // cross / own: about 1 when the threads share the cache that holds the blocks, well below
  // when the block has to come from another core's cache.
  double ratio() const { return own_bytes_per_s > 0 ? cross_bytes_per_s / own_bytes_per_s : 1; }
  bool shared() const;
  // "shared (a thread reads the other's data at 0.95x its own rate)" or "apart (...)".
  std::string describe() const;
};
// Below this ratio the threads are taken to be apart (seen on the EPYC: 0.32-0.41 apart, 0.74-1.0
// shared).
inline constexpr double kSharedCacheRatio = 0.6;
// Times the first two threads of the pool, each writing a block larger than a core's own caches
// and then reading its own block and the other's (the fastest of a few rounds; about a
// millisecond). Not measured (measured = false) with fewer than two threads or inside a
// parallel region.
CacheSharing measure_cache_sharing();

// The cache file used (see above), and reading/writing one entry (for tests and tools).
std::string peaks_cache_path();
void save_peaks(const DevicePeaks& peaks, const std::string& path);
// false when the file has no entry for `key` (or does not exist); a corrupt file is an error
// naming it.
bool load_peaks(const std::string& key, const std::string& path, DevicePeaks& out);
// The cache key of `device` for this build.
std::string peaks_key(Device device);

}  // namespace freight
