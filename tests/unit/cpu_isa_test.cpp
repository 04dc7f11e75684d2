// The CPU kernels' instruction-set level (src/backend/cpu/cpu_isa.cpp): the one loaded is the
// one FREIGHT_CPU_ISA asks for, else the best this CPU runs; ctest runs these tests once per
// level the machine supports (tests/CMakeLists.txt).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "freight/freight.h"

namespace freight {
namespace {

TEST(CpuIsa, LoadsTheLevelAskedForElseTheBestThisCpuRuns) {
  const std::string level = cpu_kernel_isa();
  const std::vector<std::string> runs = cpu_isas_supported();
  ASSERT_FALSE(runs.empty());
  EXPECT_NE(std::find(runs.begin(), runs.end(), level), runs.end()) << level;
  const char* asked = std::getenv("FREIGHT_CPU_ISA");
  if (asked && *asked) {
    EXPECT_EQ(level, asked);
    EXPECT_EQ(cpu_kernel_isa_reason(), std::string("FREIGHT_CPU_ISA=") + asked);
  } else {
    EXPECT_EQ(level, runs.back());
  }
  // Benchmark records and the peaks cache tell the levels apart.
  EXPECT_NE(build_info().find("CPU kernels " + level), std::string::npos) << build_info();
}

#if defined(__x86_64__)
// On x86-64 the levels are avx2 and avx512 (or the kernels are built in, FREIGHT_NATIVE=ON), and
// the CPU's own answer decides which of them it runs.
TEST(CpuIsa, X86LevelsFollowTheCpu) {
  const std::vector<std::string> runs = cpu_isas_supported();
  if (runs.front() == "built-in") GTEST_SKIP() << "kernels compiled in (FREIGHT_NATIVE=ON)";
  __builtin_cpu_init();
  EXPECT_EQ(runs.front(), "avx2");
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  EXPECT_EQ(runs.back() == "avx512", avx512);
}
#endif

}  // namespace
}  // namespace freight
