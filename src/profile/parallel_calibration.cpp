// Where splitting a CPU kernel over threads starts to pay, on this machine
// (freight/parallel_thresholds.h). Each kind of kernel runs through the public API over a ladder
// of sizes twice: with its threshold at 0 (split whenever there is a piece per thread) and at
// infinity (one thread). The threshold is the work per thread of the smallest size from which
// the split is clearly faster (below) at every larger size of the ladder; when it never is, twice
// the largest size. Wall time here, not the thread's CPU time that the other peaks use: what a
// split costs is the wait for the other threads (their start and their join), which is wall time.
// Each figure is the median of 15 groups of calls (a preempted group does not move it), and each
// rung keeps its fastest round over the ladder: a neighbour's process on the other core of a
// shared host stretches the wait for the second thread through a whole round, and that wait is
// the neighbour's, not the machine's. (With the median round, one `--measure` after another
// on a 2-vCPU EPYC put the convolution threshold at 9.44M or at 1.18M multiply-adds per thread;
// at 9.44M mnist-cnn's batch-1 step ran on two threads no faster than on one, at 1.18M 1.7 times
// faster. Taking the fastest group as well made the elementwise threshold jump instead: a lucky
// group of one-thread calls is as likely as a slow one.)
// Three rounds back to back still fell inside one bad spell, which lasts seconds: the threshold
// then came out at "never" in about a third of the measurements on that EPYC. So the rounds are
// graded and retried (`ladder`), and a calibration that never saw the cores free says so
// (`contended`) instead of caching what a neighbour did.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <thread>
#include <vector>

#include <omp.h>

#include "freight/autograd.h"
#include "freight/ops.h"
#include "freight/parallel_thresholds.h"
#include "freight/runtime.h"
#include "profile/peaks_device.h"

namespace freight::profile {
namespace {

// Work no kernel reaches: a threshold that keeps everything on one thread.
constexpr double kNever = 1e30;
constexpr int64_t kNeverElements = int64_t(1) << 40;

// Seconds per call of fn: calls are grouped so each timed group takes about 200 µs, then the
// median of 15 groups.
template <class Fn>
double wall_seconds(Fn&& fn) {
  using Clock = std::chrono::steady_clock;
  fn();
  auto t0 = Clock::now();
  fn();
  double once = std::max(1e-7, std::chrono::duration<double>(Clock::now() - t0).count());
  const int inner = int(std::clamp(2e-4 / once, 1.0, 1000.0));
  return median_seconds(false, 15,
                        [&] {
                          for (int i = 0; i < inner; ++i) fn();
                        }) /
         inner;
}

// `work[i]`: the work per thread of rung i; `split[i]`, `one[i]`: its seconds split and on one
// thread. A split must save at least 5% to count: a rung that only just wins alone may lose
// inside a training step, where the other thread's caches hold other data. (A 10% margin was
// too strict for the convolution ladder on the 2-core Xeon: its 1.18M-MAC rung saved 5-11%
// between measurements, so the threshold flipped between 1.18M and 2.33M from one `--measure`
// to the next, and at 2.33M resnet56-cifar's batch-1 step ran no faster on two threads than on
// one, where at 1.18M it ran about 8% faster.)
double crossover(const std::vector<double>& work, const std::vector<double>& split,
                 const std::vector<double>& one) {
  size_t from = work.size();
  while (from > 0 && split[from - 1] < 0.95 * one[from - 1]) --from;
  return from == work.size() ? 2 * work.back() : work[from];
}

// A chain of dependent multiply-adds that touches no memory: a core runs it at the same speed
// whatever its neighbours do, unless it is not running it at all.
float chain(int64_t steps, float a) {
  for (int64_t i = 0; i < steps; ++i) a = a * 0.999999f + 1e-7f;
  return a;
}

// How much longer `threads` threads take than one to run the same chain each (tens of µs of
// it): about 1 when every core is free; while another process holds a core, the thread waiting
// for it stretches the parallel run to the scheduler's slices. The median of 9 adjacent pairs.
double core_wait_ratio(int threads) {
  using Clock = std::chrono::steady_clock;
  constexpr int64_t kSteps = 50000;
  volatile float sink = 0;
  std::vector<double> ratios;
  for (int r = 0; r < 9; ++r) {
    auto t0 = Clock::now();
    sink = chain(kSteps, sink + 1.0f);
    auto t1 = Clock::now();
#pragma omp parallel num_threads(threads)
    {
      const float v = chain(kSteps, float(omp_get_thread_num()));
      if (v == 12345.0f) sink = v;  // never true; keeps the chain
    }
    auto t2 = Clock::now();
    const double one = std::chrono::duration<double>(t1 - t0).count();
    ratios.push_back(std::chrono::duration<double>(t2 - t1).count() / std::max(one, 1e-9));
  }
  return median(ratios);
}

// The probe in use: core_wait_ratio, or a test's (set_core_wait_probe).
std::atomic<double (*)(int)> g_probe{nullptr};

double probe_cores(int threads) {
  double (*probe)(int) = g_probe.load();
  return probe ? probe(threads) : core_wait_ratio(threads);
}

}  // namespace

void set_core_wait_probe(double (*probe)(int threads)) {
  g_probe = probe;
}

std::vector<double> fastest_rounds(const std::vector<std::vector<double>>& rounds,
                                   const std::vector<int>& grade) {
  // The best grade that two rounds reached (one lucky round alone does not decide), or the
  // worst when fewer than two rounds ran.
  int top = grade.empty() ? 0 : *std::min_element(grade.begin(), grade.end());
  for (int g : grade)
    if (g > top && std::count_if(grade.begin(), grade.end(), [&](int x) { return x >= g; }) >= 2)
      top = g;
  std::vector<double> best;
  for (size_t r = 0; r < rounds.size(); ++r) {
    if (grade[r] < top) continue;
    if (best.empty()) best.assign(rounds[r].size(), INFINITY);
    for (size_t i = 0; i < best.size(); ++i) best[i] = std::min(best[i], rounds[r].at(i));
  }
  return best;
}

namespace {

// Runs `fn(rung)` for every rung under the thresholds `on` (split) and `off` (one thread), round
// after round over the whole ladder, and grades each round: 0 when another process held a core
// before or after it (core_wait_ratio at 1.3 or more), 1 when the cores were free, 2 when the
// split also won at the top rung. Rounds go on until three reached grade 2, at most eight, with
// a pause after any other. Each rung keeps its fastest round among those of the best grade that
// two rounds reached, or better (fastest_rounds); `contended` is set when every round was grade 0.
//
// Grade 2 is there for spells in which both threads compute at full rate but work split over
// shared data is slow: on the 2-vCPU EPYC (a virtual machine) the probe read the cores free
// throughout while the split ran at 0.7 times one thread's time at the top rung in most
// processes, and at 1.04 or 1.5-1.7 times in others, for seconds at a time. The cause is outside
// the guest (a cache line's round trip between the two threads read 60 to 1100 ns from one
// process to the next, with no clear link to the split's speed). The threshold is the machine's
// in its good spells; a run that meets a bad one can lose to one thread at batch 1.
template <class Fn>
void ladder(size_t rungs, ParallelThresholds on, ParallelThresholds off, std::vector<double>& split,
            std::vector<double>& one, bool& contended, Fn&& fn) {
  constexpr int kGood = 3, kMaxRounds = 8;
  constexpr double kFree = 1.3;
  // More threads than the process may run on at once take turns whoever else is there: probe
  // the cores it has (omp_get_num_procs follows the CPU affinity, as a container's cpuset sets it).
  const int threads = std::min(num_threads(), std::max(1, omp_get_num_procs()));
  std::vector<std::vector<double>> s, o;
  std::vector<int> grade;
  int n_good = 0;
  for (int r = 0; r < kMaxRounds && n_good < kGood; ++r) {
    const bool free_before = probe_cores(threads) < kFree;
    s.emplace_back(rungs), o.emplace_back(rungs);
    for (size_t i = 0; i < rungs; ++i) {
      set_parallel_thresholds(on);
      s.back()[i] = wall_seconds([&] { fn(i); });
      set_parallel_thresholds(off);
      o.back()[i] = wall_seconds([&] { fn(i); });
    }
    const bool free = free_before && probe_cores(threads) < kFree;
    grade.push_back(!free ? 0 : s.back().back() < 0.95 * o.back().back() ? 2 : 1);
    if (grade.back() == 2)
      ++n_good;
    else if (r + 1 < kMaxRounds)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  split = fastest_rounds(s, grade);
  one = fastest_rounds(o, grade);
  if (*std::max_element(grade.begin(), grade.end()) == 0) contended = true;
}

}  // namespace

ParallelThresholds measure_parallel_thresholds(bool& contended) {
  contended = false;
  const ParallelThresholds saved = parallel_thresholds();
  const int threads = num_threads();
  ParallelThresholds result;
  if (threads < 2) return result;  // nothing to split
  std::vector<double> work, split, one;
  try {
    // Convolutions: a 3x3 convolution of 16 channels to 16, forward and both gradients, on one
    // image of growing size. At batch 1 the engines split the rows, tiles or taps of the image,
    // the costliest split to start (a fork and join per pass, the operands of one image shared);
    // over images (larger batches) a split pays from less work per thread, so this threshold is
    // on the safe side there. The work per thread is one pass's multiply-adds over the threads.
    {
      const std::vector<int64_t> sides = {6, 8, 11, 16, 22, 32, 45, 64};
      std::vector<Tensor> xs, gys;
      Tensor w = Tensor::uniform({16, 16, 3, 3}, -0.1, 0.1);
      w.set_requires_grad();
      work.clear();
      for (int64_t s : sides) {
        xs.push_back(Tensor::uniform({1, 16, s, s}, -1, 1));
        xs.back().set_requires_grad();
        gys.push_back(Tensor::uniform({1, 16, s, s}, -1, 1));
        work.push_back(double(s * s) * 16 * 9 * 16 / threads);
      }
      ParallelThresholds on = saved, off = saved;
      on.conv_macs_per_thread = 0, off.conv_macs_per_thread = kNever;
      struct Recording {  // the gradients need the tape; the caller's mode comes back after
        bool was = grad_enabled();
        Recording() { set_grad_enabled(true); }
        ~Recording() { set_grad_enabled(was); }
      } recording;
      ladder(sides.size(), on, off, split, one, contended, [&](size_t i) {
        Tensor y = conv2d(xs[i], w, Tensor(), {1, 1}, {1, 1});
        y.backward(gys[i]);
        xs[i].zero_grad(), w.zero_grad();
      });
      result.conv_macs_per_thread = crossover(work, split, one);
    }
    // GEMMs: one row against a square weight (a linear layer at batch 1), growing widths.
    {
      NoGradGuard no_grad;
      const std::vector<int64_t> widths = {64, 128, 256, 512, 1024, 2048};
      std::vector<Tensor> xs, ws;
      work.clear();
      for (int64_t n : widths) {
        xs.push_back(Tensor::uniform({1, n}, -1, 1));
        ws.push_back(Tensor::uniform({n, n}, -0.1, 0.1));
        work.push_back(double(n) * double(n) / threads);
      }
      ParallelThresholds on = saved, off = saved;
      on.gemm_macs_per_thread = 0, off.gemm_macs_per_thread = kNever;
      ladder(widths.size(), on, off, split, one, contended,
             [&](size_t i) { (void)matmul(xs[i], ws[i]); });
      // OpenBLAS's own rule wins from the smallest rung up: keep it.
      const double c = crossover(work, split, one);
      result.gemm_macs_per_thread = c <= work.front() ? 0.0 : c;
    }
    // Elementwise: the sum of two vectors, growing lengths.
    {
      NoGradGuard no_grad;
      std::vector<Tensor> as, bs;
      work.clear();
      for (int64_t n = 4096; n <= (int64_t(1) << 21); n *= 2) {
        as.push_back(Tensor::uniform({n}, -1, 1));
        bs.push_back(Tensor::uniform({n}, -1, 1));
        work.push_back(double(n) / threads);
      }
      ParallelThresholds on = saved, off = saved;
      on.elementwise_per_thread = 1;
      off.elementwise_per_thread = kNeverElements;
      ladder(as.size(), on, off, split, one, contended, [&](size_t i) { (void)add(as[i], bs[i]); });
      result.elementwise_per_thread = int64_t(crossover(work, split, one));
    }
  } catch (...) {
    set_parallel_thresholds(saved);
    throw;
  }
  set_parallel_thresholds(saved);
  return result;
}

}  // namespace freight::profile
