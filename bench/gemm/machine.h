// What the CPU lab needs to know about the machine: its model, cores and caches (read at run
// time), and its theoretical float32 peak, derived step by step:
//
//   peak = cores × clock (GHz) × FMA units per core × floats per vector × 2 flops per FMA
//
// The clock is measured (a chain of dependent integer additions runs at one per cycle), the
// vector width comes from the instruction set (AVX-512: 16 floats), and the number of FMA units
// is measured too: a loop of independent vector FMAs retires as many per cycle as there are
// units. /proc/cpuinfo's "cpu MHz" is shown beside the measured clock; on a virtual machine it is
// often just the base or TSC frequency.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "gemm_cpu.h"

namespace gemm_lab {

struct Machine {
  std::string cpu_model;      // /proc/cpuinfo "model name"
  std::string cpu_signature;  // "family 6 model 143 stepping 8", a virtual machine may mask it
  int cores = 1;              // processors available to this process (= OpenMP threads)
  Caches caches;              // per-core L1d and L2, shared L3
  std::string cache_text;     // "L1d 48 KiB, L2 2 MiB per core; L3 480 MiB shared"
  std::string isa;            // "AVX-512", "AVX2+FMA", "SSE"
  int vector_floats = 4;      // floats per widest vector register the lab uses
  double cpuinfo_ghz = 0;     // "cpu MHz" / 1000, 0 if absent
  double measured_ghz = 0;    // one core, running the clock loop
  double fma_per_cycle = 0;   // measured vector FMA instructions retired per cycle, one core
  int fma_units = 1;          // fma_per_cycle rounded to a whole number
  double fma_loop_gflops_1 = 0, fma_loop_gflops_all = 0;  // the FMA loop's own rate

  double peak_gflops(int threads) const {
    return threads * measured_ghz * fma_units * vector_floats * 2.0;
  }
  // The derivation, one line per factor, for the report.
  std::vector<std::string> explain_peak() const;
};

// Reads the description and, when `measure` is set, runs the clock and FMA loops (~1 s).
Machine probe_machine(bool measure = true);

// Caches from sysfs (/sys/devices/system/cpu/cpu0/cache), falling back to sysconf.
Caches read_caches(std::string* text = nullptr);

}  // namespace gemm_lab
