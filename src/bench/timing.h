// Timing of whole training steps and of batch-1 inference for `freight bench`. The adaptive rule
// is the same as bench/pytorch/step_bench.py's (`--seconds`), so both sides of a comparison are
// timed alike:
//   1. the first step is timed alone (it allocates); when it exceeds max_step_seconds the row is
//      skipped, having cost one step;
//   2. warm-up continues until at least 2 steps and warmup_seconds have passed; the warm-up steps
//      after the first estimate the step time t;
//   3. R rounds of N steps each, R = 5 (fewer when 5 rounds of one step would exceed `seconds`,
//      never fewer than min_rounds), N = max(1, round(seconds / (R t))); the per-step time of
//      each round is kept, and the median, min and max over rounds are reported.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "freight/device.h"
#include "freight/nn/model_file.h"

namespace freight::bench {

struct TimingOptions {
  double seconds = 1.0;          // timed steps per row, about
  int min_rounds = 3;            // at least this many rounds, whatever the step costs
  double warmup_seconds = 0.25;  // at least this much warm-up (and at least 2 steps)
  double max_step_seconds = 0;   // skip a row whose first step takes longer (0: never skip)
  double latency_seconds = 0.3;  // batch-1 inference calls, about
  // Called after each timed round, outside the timing (freight bench's cache-sharing reading).
  std::function<void()> between_rounds;
};

struct StepTiming {
  bool skipped = false;
  std::string reason;  // why it was skipped
  double first_step_s = 0;
  int warmup_steps = 0, rounds = 0, steps_per_round = 0;
  double median_s = 0, min_s = 0, max_s = 0;  // per step, over rounds
};

// Times `step` by the rule above; `sync` waits for queued work (a GPU) and runs after each
// timed step or round.
StepTiming time_steps(const std::function<void()>& step, const std::function<void()>& sync,
                      const TimingOptions& options);

struct CallTiming {
  double median_s = 0, min_s = 0;
  int calls = 0;
};
// Each call timed alone, synchronised: 3 warm-up calls, then enough calls for about `seconds`
// (at least 10, at most 2000).
CallTiming time_calls(const std::function<void()>& call, const std::function<void()>& sync,
                      double seconds);

// One Freight row: a zoo model (or model file) trained on random data of its input shape with
// SGD (momentum 0.9, lr 0.01), on `device` with `threads` CPU threads.
struct FreightMeasurement {
  StepTiming step;
  bool has_latency = false;
  CallTiming latency;        // batch 1, eval mode, no grad
  double forward_flops = 0;  // nn::Module::flops of the batch's input shape
  // Forward and backward FLOPs of a training step (freight::training_flops): about 3x the
  // forward, less the first layer's input gradient, which autograd never computes.
  double step_flops = 0;
  size_t peak_memory = 0;  // bytes on the device: parameters, data, gradients, optimizer
                           // state and activations of the step
};
FreightMeasurement measure_freight(const nn::ModelSpec& spec, int64_t batch, Device device,
                                   int threads, const TimingOptions& options, bool latency);

}  // namespace freight::bench
