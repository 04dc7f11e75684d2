// Run-time choice of the CPU kernels' instruction-set level. The kernel sources
// (src/backend/cpu/*_cpu.cpp) are compiled once per level into a module beside libfreight
// (libfreight_cpu_avx2.so with -march=x86-64-v3, libfreight_cpu_avx512.so with x86-64-v4; one
// "generic" module elsewhere); libfreight itself is compiled for the architecture's baseline, so
// nothing outside the module runs an instruction the CPU may lack. The first look-up of an empty
// CPU kernel slot (core/kernel.h) picks the best level the CPU runs, or FREIGHT_CPU_ISA's, and
// dlopens its module, whose static registrars fill the slots.
//
// Why modules and not one library with every level in it: the kernels include the same headers
// (the vector helpers, std::, fmt), and the linker keeps one copy of each inline function across
// a shared library, possibly the AVX-512 one, which baseline code would then call. A module is
// compiled with hidden visibility, so its inline copies bind inside it; only the kernel slots
// (FREIGHT_KERNEL) are shared, and those resolve to libfreight's.
//
// FREIGHT_CPU_ISAS (set by CMake) lists the levels built, lowest first; without it (a
// -DFREIGHT_NATIVE=ON build, the CUDA emulation) the kernels are compiled into the library and
// there is nothing to load.
#include <fmt/format.h>

#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "core/engine_modules.h"
#include "core/kernel.h"
#include "freight/error.h"
#include "freight/runtime.h"

namespace freight {
namespace {

#if defined(FREIGHT_CPU_ISAS)
// The levels built, lowest first ("avx2,avx512").
std::vector<std::string> built_levels() {
  std::vector<std::string> out;
  std::string all = FREIGHT_CPU_ISAS;
  for (size_t begin = 0; begin <= all.size();) {
    size_t end = all.find(',', begin);
    if (end == std::string::npos) end = all.size();
    if (end > begin) out.push_back(all.substr(begin, end - begin));
    begin = end + 1;
  }
  return out;
}

// Whether this CPU (and its operating system, which must save the wider registers: GCC's and
// clang's __builtin_cpu_supports check that too) runs the code of a level. avx2 is x86-64-v3
// (AVX2, FMA, BMI1/2, F16C, MOVBE, LZCNT: every Intel CPU since Haswell, AMD since Excavator);
// avx512 is x86-64-v4 (AVX-512 F, BW, CD, DQ, VL: Skylake-SP and later, Zen 4).
bool cpu_runs(const std::string& level) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  const bool v3 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                  __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2") &&
                  __builtin_cpu_supports("avx") && __builtin_cpu_supports("popcnt");
  if (level == "avx2") return v3;
  if (level == "avx512")
    return v3 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512vl");
  return false;
#else
  return level == "generic";
#endif
}
#endif

struct Choice {
  std::string level;   // what was loaded ("avx512", or "built-in" without modules)
  std::string reason;  // why: "best this CPU runs" or "FREIGHT_CPU_ISA=avx2"
};
Choice g_choice;
std::once_flag g_loaded;

#if defined(FREIGHT_CPU_ISAS)
std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

std::string pick_level() {
  const std::vector<std::string> built = built_levels();
  const char* env = std::getenv("FREIGHT_CPU_ISA");
  if (env && *env) {
    const std::string want = env;
    bool known = false;
    for (const std::string& b : built) known = known || b == want;
    FREIGHT_CHECK(known, fmt::format("FREIGHT_CPU_ISA={}: this build has CPU kernels for {} "
                                     "only; unset it to pick the best one this CPU runs",
                                     want, joined(built)));
    FREIGHT_CHECK(cpu_runs(want),
                  fmt::format("FREIGHT_CPU_ISA={}: this CPU cannot run the {} kernels (it "
                              "runs: {}); pick a lower level or unset it",
                              want, want, joined(cpu_isas_supported())));
    g_choice.reason = fmt::format("FREIGHT_CPU_ISA={}", want);
    return want;
  }
  for (auto it = built.rbegin(); it != built.rend(); ++it)
    if (cpu_runs(*it)) {
      g_choice.reason = "the best this CPU runs";
      return *it;
    }
  throw Error(
      fmt::format("this CPU runs none of the CPU kernel levels this build has ({}): "
                  "the lowest, avx2, needs AVX2, FMA and BMI2 (Intel Haswell or AMD "
                  "Excavator and later); rebuild with -DFREIGHT_NATIVE=ON for this CPU",
                  joined(built)));
}

void load_module(const std::string& level) {
  std::string failures;
  if (detail::open_engine_module("libfreight_cpu_" + level + ".so", &failures)) return;
  throw Error(
      fmt::format("cannot load the {} CPU kernels ({}); tried:{}\n(the module is built "
                  "beside libfreight and must be installed beside it)",
                  level, g_choice.reason, failures));
}
#endif

void load_once() {
#if defined(FREIGHT_CPU_ISAS)
  const std::string level = pick_level();
  load_module(level);
  g_choice.level = level;
#else
  const char* env = std::getenv("FREIGHT_CPU_ISA");
  FREIGHT_CHECK(!env || !*env,
                fmt::format("FREIGHT_CPU_ISA={}: this build has its CPU kernels compiled in "
                            "(-DFREIGHT_NATIVE=ON), so there is no level to pick; unset it, or "
                            "build with -DFREIGHT_NATIVE=OFF",
                            env));
  g_choice = {"built-in", "compiled into the library"};
#endif
}
}  // namespace

namespace detail {
void load_cpu_kernels() {
  std::call_once(g_loaded, load_once);
}
}  // namespace detail

std::string cpu_kernel_isa() {
  detail::load_cpu_kernels();
  return g_choice.level;
}

std::string cpu_kernel_isa_reason() {
  detail::load_cpu_kernels();
  return g_choice.reason;
}

std::vector<std::string> cpu_isas_supported() {
  std::vector<std::string> out;
#if defined(FREIGHT_CPU_ISAS)
  for (const std::string& level : built_levels())
    if (cpu_runs(level)) out.push_back(level);
#else
  out.push_back("built-in");
#endif
  return out;
}

}  // namespace freight
