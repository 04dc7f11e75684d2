#!/bin/bash
# Runs the GEMM lab's CUDA kernels on the CPU emulation of CUDA (tests/cuda/emulation/README.md)
# with AddressSanitizer and UBSan, in both warp schedules, and checks them against the float64
# reference. No GPU needed; about a minute on two cores. Usage:
#   bench/gemm/emulation/run.sh [build-dir]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
emu=$repo/tests/cuda/emulation
build=${1:-$repo/build-gemm-emulation}
mkdir -p "$build"
python3 "$emu/translate.py" kernels "$here/../gemm_kernels.cu" "$build/gemm_kernels_emu.cpp"
# __CUDACC__ selects device code as in the emulation of the engine's kernels.
g++ -std=c++20 -O1 -g -fopenmp -fsanitize=address,undefined -fno-sanitize-recover=all \
  -fno-omit-frame-pointer -Wno-unknown-pragmas -D__CUDACC__=1 \
  -I "$emu/include" -I "$here/.." -include "$here/emu_prelude.h" \
  "$build/gemm_kernels_emu.cpp" "$here/check_kernels.cpp" "$here/../gemm_check.cpp" \
  "$here/../gemm_cublas.cpp" \
  -o "$build/gemm_kernels_emu"
export ASAN_OPTIONS=detect_leaks=0 OMP_NUM_THREADS=2
for schedule in lockstep serial; do
  echo "== warp schedule: $schedule"
  if [ "$schedule" = serial ]; then export EMU_SERIAL=1; fi
  "$build/gemm_kernels_emu"
done
