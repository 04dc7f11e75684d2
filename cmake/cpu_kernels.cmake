# The CPU kernels per instruction-set level (src/backend/cpu/cpu_isa.cpp picks one at run time).
#
# libfreight is compiled for the architecture's baseline; the kernel sources are compiled once per
# level into a MODULE beside it, libfreight_cpu_<level>.so, which libfreight dlopens at the first
# CPU kernel call. Hidden visibility keeps every inline function a module compiles (vector
# helpers, std::, fmt) bound inside that module: in one shared library the linker would keep a
# single copy of each, possibly the AVX-512 one, for baseline code to call. Only the kernel slots
# are shared (FREIGHT_KERNEL gives them default visibility), and resolve to libfreight's.
#
# Levels (lowest first): on x86-64, avx2 = x86-64-v3 (Haswell, Excavator and later) and avx512 =
# x86-64-v4 (Skylake-SP, Zen 4 and later), both with generic tuning like a distribution's
# package; on other architectures one generic module. The avx512 level keeps loops that GCC
# vectorises by itself at 256 bits, as GCC's tuning for every Intel AVX-512 core does (and so
# -march=native did on the machines the kernels were tuned on): generic tuning would widen them to
# 512 bits, and lenet5's step looked slower so. The explicit AVX-512 engines (intrinsics) are
# unaffected, and so are the results (the width changes no order of operations). The target
# freight_modules (CMakeLists.txt) builds them all: whatever runs the engine (the command, tests,
# benchmarks) depends on it. Installing Freight must put the modules in the directory of
# libfreight.so.
if(FREIGHT_NATIVE)
  set(FREIGHT_CPU_ISAS "" CACHE INTERNAL "CPU kernel levels built as modules")
  return()
endif()

if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
  set(freight_cpu_isas avx2 avx512)
  set(freight_cpu_isa_flags_avx2 -march=x86-64-v3 -mtune=generic)
  set(freight_cpu_isa_flags_avx512 -march=x86-64-v4 -mtune=generic -mprefer-vector-width=256)
else()
  set(freight_cpu_isas generic)
  set(freight_cpu_isa_flags_generic "")
endif()
# FREIGHT_CPU_LEVELS picks some of them (default: all). The sanitizer tree (scripts/
# build-sanitized) builds only the levels its machine runs: a module the CPU cannot run is never
# loaded there, and compiling one under the sanitizers takes minutes of CI's two cores.
set(FREIGHT_CPU_LEVELS "" CACHE STRING
  "CPU kernel levels to build as modules, a ;-list (default: every level of the architecture)")
if(FREIGHT_CPU_LEVELS)
  foreach(level IN LISTS FREIGHT_CPU_LEVELS)
    if(NOT level IN_LIST freight_cpu_isas)
      message(FATAL_ERROR "FREIGHT_CPU_LEVELS: '${level}' is not a level of this architecture "
                          "(${freight_cpu_isas})")
    endif()
  endforeach()
  set(freight_cpu_isas_all ${freight_cpu_isas})
  set(freight_cpu_isas "")
  foreach(level IN LISTS freight_cpu_isas_all)  # in this order: lowest first
    if(level IN_LIST FREIGHT_CPU_LEVELS)
      list(APPEND freight_cpu_isas ${level})
    endif()
  endforeach()
endif()
set(FREIGHT_CPU_ISAS "${freight_cpu_isas}" CACHE INTERNAL "CPU kernel levels built as modules")

foreach(isa IN LISTS freight_cpu_isas)
  set(module freight_cpu_${isa})
  add_library(${module} MODULE ${freight_cpu_kernel_sources})
  set_target_properties(${module} PROPERTIES PREFIX lib CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON)
  target_include_directories(${module} PRIVATE src ${FREIGHT_CBLAS_INCLUDE})
  target_compile_options(${module} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:${freight_warnings} ${freight_cpu_flags} ${freight_cpu_isa_flags_${isa}}>)
  # libfreight (the tensors, the slots) is already loaded when the module is; linking it names it
  # as a dependency, so the module's undefined symbols resolve against it.
  target_link_libraries(${module} PRIVATE freight OpenMP::OpenMP_CXX ${FREIGHT_OPENBLAS})
  add_dependencies(freight_modules ${module})
  list(APPEND freight_module_libraries ${module})  # installed beside libfreight (install.cmake)
endforeach()
string(JOIN "," freight_cpu_isas_text ${freight_cpu_isas})
set_property(SOURCE src/backend/cpu/cpu_isa.cpp APPEND PROPERTY COMPILE_DEFINITIONS
  FREIGHT_CPU_ISAS="${freight_cpu_isas_text}")
