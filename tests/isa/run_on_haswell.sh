#!/usr/bin/env bash
# The portable build on an emulated CPU without AVX-512: qemu-user's Haswell model runs AVX2 and
# FMA but kills any AVX-512 instruction with SIGILL, so an instruction outside the dispatched
# avx2 kernels (libfreight compiled for this machine, a stray inline copy from the avx512 module)
# fails this test. It checks that the avx2 kernels are picked, that asking for avx512 is a clear
# error, and runs a short training and part of the op table.
# Usage: run_on_haswell.sh QEMU_X86_64 FREIGHT_CLI FREIGHT_OP_TESTS
set -euo pipefail
qemu=$1 cli=$2 op_tests=$3
haswell() { "$qemu" -cpu Haswell "$@"; }
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
unset FREIGHT_CPU_ISA
# The freight command restarts itself once to set GOMP_SPINCOUNT (tools/freight/openmp_wait.h),
# and qemu-user runs an exec of /proc/self/exe natively, outside the emulated CPU: on a host
# with AVX-512 the restarted command would pick the avx512 kernels and prove nothing. With the
# variable set, the command runs on under qemu.
export GOMP_SPINCOUNT=10000

echo "== freight devices"
out=$(haswell "$cli" devices) || fail "freight devices exited with $? (132: SIGILL)"
echo "$out"
grep -q "CPU kernels: avx2 (the best this CPU runs; this CPU runs: avx2)" <<<"$out" ||
  fail "expected the avx2 kernels, chosen as the best a Haswell runs"

echo "== FREIGHT_CPU_ISA=avx512 freight devices (must refuse)"
if out=$(FREIGHT_CPU_ISA=avx512 haswell "$cli" devices 2>&1); then
  fail "FREIGHT_CPU_ISA=avx512 ran on a CPU without AVX-512: $out"
fi
grep -q "this CPU cannot run the avx512 kernels" <<<"$out" || fail "unclear refusal: $out"

echo "== freight train (mlp, synthetic data, one short epoch)"
haswell "$cli" train --model mlp --data synthetic --device cpu --threads 2 --epochs 1 --batch-size 32 \
  --limit-train 64 --limit-test 32 --no-save ||
  fail "freight train exited with $? (132: SIGILL)"

# The families with AVX-512 code on the other level (convolution, LSTM) and the GEMM users, in
# float32, plus a few gradients. Not the whole table: qemu is 20 to 50 times slower, and far
# slower still on some kernels (the softmax cases take minutes under qemu, under a second
# natively), so the whole table would take most of an hour.
echo "== op table subset"
cases=(conv2d* lstm_layer* linear* matmul* batch_norm* max_pool2d* cross_entropy gelu embedding
  dropout*)
filter=""
for c in "${cases[@]}"; do filter+="Ops/OpTable.*Float32/$c:"; done
for c in conv2d lstm_layer_all linear; do filter+="Ops/OpTable.GradientsMatchFiniteDifferences/$c:"; done
haswell "$op_tests" --gtest_brief=1 --gtest_filter="$filter" ||
  fail "the op tests exited with $? (132: SIGILL)"
echo "PASS"
