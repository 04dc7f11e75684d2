#!/bin/bash
# Builds the CPU emulation of the CUDA backend and runs the CUDA tests and the op table's
# CudaMatchesCpu entries under it, in both warp schedules (README.md). Usage:
#   tests/cuda/emulation/run.sh [build-dir] [extra gtest filter]
# The first build compiles the whole engine with sanitizers: several minutes on two cores.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../../../build-cuda-emulation}
filter=${2:-*}
cmake -S "$here" -B "$build" -G Ninja > /dev/null
ninja -C "$build" -j2
export ASAN_OPTIONS=detect_leaks=0 OMP_NUM_THREADS=2 FREIGHT_SOURCE_DIR="$here/../../.."
for schedule in lockstep serial; do
  echo "== warp schedule: $schedule"
  if [ "$schedule" = serial ]; then export EMU_SERIAL=1; fi
  "$build/cuda_tests" --gtest_filter="$filter" --gtest_brief=1
  "$build/ops_tests" --gtest_filter="*CudaMatchesCpu*" --gtest_brief=1
done
