// How long OpenMP's idle threads spin before they sleep, set for the command's process.
#pragma once

namespace freight::cli {

// libgomp's worker threads spin-wait after a parallel region for GOMP_SPINCOUNT iterations
// (300,000 by default, milliseconds) before they sleep on a futex. On a 2-vCPU KVM guest of a
// Zen 3 EPYC that default made whole processes run at a third of their speed at random: mlp's
// step at batch 1 on 2 threads took 0.25 ms in some processes and 0.85-0.9 ms in others (11 of
// 20 processes of mlp and lstm-rows were over 1.5 times their fastest, every layer slowed, the
// single-threaded ones too), while 3,000 to 20,000 iterations gave 2 slow processes in 36 and the
// same speed where nothing was slow. OMP_WAIT_POLICY=passive (no spinning) makes every region
// pay a wake-up instead: lstm-rows 13 ms against 0.55. libgomp reads the variable when it loads,
// before main, so the command restarts itself once with GOMP_SPINCOUNT=10000 unless the user
// set GOMP_SPINCOUNT or OMP_WAIT_POLICY. Returns only when no restart was needed (or exec
// failed, when the command runs on with libgomp's default).
void settle_openmp_wait(char** argv);

}  // namespace freight::cli
