#!/bin/bash
# Builds the CPU emulation of the CUDA backend and runs the CUDA tests and the op table's
# CudaMatchesCpu entries under it, in both warp schedules (lockstep, EMU_SERIAL=1) and both
# allocator modes (EMU_ALLOCATOR=exact|rounded): four runs, two at a time, each with its own
# stream interleavings (EMU_STREAM_SEED), the lockstep exact-allocator run with the race check
# (EMU_RACECHECK=1: it needs unpoisoned memory, and its second pass of each launch runs the
# serial schedule), each logged to
# <build-dir>/run-<schedule>-<allocator>.log (README.md); then the data-parallel GPU tests as a
# job of 2 ranks under mpirun (run-dist-<allocator>.log). Usage:
#   tests/cuda/emulation/run.sh [build-dir] [extra gtest filter for cuda_tests]
# Exits non-zero when any run fails, after printing the failing runs' logs' tails.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../../../build-cuda-emulation}
filter=${2:-*}
cmake -S "$here" -B "$build" -G Ninja > /dev/null
ninja -C "$build" -j"$(nproc)"
export ASAN_OPTIONS=detect_leaks=0 OMP_NUM_THREADS=1

one_run() {  # schedule allocator seed race|-; leaves the exit status in run-<schedule>-<allocator>.rc
  local log="$build/run-$1-$2.log" rc=0
  (
    if [ "$1" = serial ]; then export EMU_SERIAL=1; else unset EMU_SERIAL; fi
    export EMU_ALLOCATOR=$2 EMU_STREAM_SEED=$3
    if [ "$4" = race ]; then export EMU_RACECHECK=1; else unset EMU_RACECHECK; fi
    "$build/cuda_tests" --gtest_filter="$filter" --gtest_brief=1 &&
      "$build/ops_tests" --gtest_filter="*CudaMatchesCpu*" --gtest_brief=1
  ) > "$log" 2>&1 || rc=$?
  echo "$rc" > "$build/run-$1-$2.rc"
}

combos=("lockstep exact 1 race" "serial rounded 2 -" "lockstep rounded 3 -" "serial exact 4 -")
jobs=$(env -u OMP_NUM_THREADS nproc)  # (nproc obeys OMP_NUM_THREADS, set to 1 above)
failed=()
start=$SECONDS
rm -f "$build"/run-*.rc
running=0
for combo in "${combos[@]}"; do
  if [ "$running" -ge "$jobs" ]; then  # one_run never fails: it leaves its status in a file
    wait -n
    running=$((running - 1))
  fi
  # shellcheck disable=SC2086
  one_run $combo &
  running=$((running + 1))
done
wait
for combo in "${combos[@]}"; do
  # shellcheck disable=SC2086
  set -- $combo
  if [ "$(cat "$build/run-$1-$2.rc")" = 0 ]; then
    echo "== emulation $1 schedule, $2 allocator, stream seed $3: passed ($(grep -ho '[0-9]* tests\? from [0-9]* test suites\? ran' "$build/run-$1-$2.log" | paste -sd ';' -))"
    grep -h '^CUDA emulation race check' "$build/run-$1-$2.log" | sed 's/^/   /' || true
  else
    echo "== emulation $1 schedule, $2 allocator, stream seed $3: FAILED (log: $build/run-$1-$2.log)"
    tail -40 "$build/run-$1-$2.log"
    failed+=("$combo")
  fi
done
echo "== emulation: $(( ${#combos[@]} - ${#failed[@]} )) of ${#combos[@]} runs passed in $(( SECONDS - start )) s"

# Data parallelism on GPUs: an emulated job of 2 ranks (mpirun), each on its own emulated device,
# NCCL emulated over MPI (include/nccl.h); lockstep warps, once per allocator mode.
root=()
[ "$(id -u)" = 0 ] && root=(--allow-run-as-root)
dist_failed=0
for run in "exact 5" "rounded 6"; do
  set -- $run
  log="$build/run-dist-$1.log"
  dist_start=$SECONDS
  if EMU_DEVICES=2 EMU_ALLOCATOR=$1 EMU_STREAM_SEED=$2 FREIGHT_DIST_TIMEOUT=120 \
      timeout 600 mpirun "${root[@]}" --oversubscribe -np 2 --bind-to none \
      "$build/cuda_dist_tests" --gtest_brief=1 > "$log" 2>&1; then
    echo "== emulation, 2 ranks on 2 emulated GPUs, $1 allocator, stream seed $2: passed ($(grep -ho '[0-9]* tests\? from [0-9]* test suites\? ran' "$log" | paste -sd ';' -); $(( SECONDS - dist_start )) s)"
  else
    echo "== emulation, 2 ranks on 2 emulated GPUs, $1 allocator, stream seed $2: FAILED (log: $log)"
    tail -40 "$log"
    dist_failed=1
  fi
done
[ ${#failed[@]} -eq 0 ] && [ "$dist_failed" = 0 ]
