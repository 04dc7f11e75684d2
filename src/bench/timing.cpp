// Adaptive step timing and the Freight side of `freight bench` (rule in timing.h).
#include "bench/timing.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

#include "freight/autograd.h"
#include "freight/explain.h"
#include "freight/nn/container.h"
#include "freight/random.h"
#include "freight/runtime.h"
#include "freight/training.h"

namespace freight::bench {

namespace {
using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}
}  // namespace

StepTiming time_steps(const std::function<void()>& step, const std::function<void()>& sync,
                      const TimingOptions& o) {
  StepTiming r;
  auto t0 = Clock::now();
  step();
  sync();
  r.first_step_s = since(t0);
  if (o.max_step_seconds > 0 && r.first_step_s > o.max_step_seconds) {
    r.skipped = true;
    r.reason = fmt::format("one step took {:.2f} s, over the limit of {:g} s (--max-step-seconds)",
                           r.first_step_s, o.max_step_seconds);
    return r;
  }
  int warm = 1;
  double warm_time = r.first_step_s, after_first = 0;
  while (warm < 2 || warm_time < o.warmup_seconds) {
    auto t = Clock::now();
    step();
    sync();
    double dt = since(t);
    after_first += dt;
    warm_time += dt;
    ++warm;
  }
  r.warmup_steps = warm;
  double est = std::max(after_first / double(warm - 1), 1e-9);
  int rounds = 5;
  if (double(rounds) * est > o.seconds) rounds = int(o.seconds / est);
  rounds = std::max(rounds, std::max(o.min_rounds, 1));
  int per_round = std::max(1, int(std::lround(o.seconds / (double(rounds) * est))));
  std::vector<double> times;
  for (int i = 0; i < rounds; ++i) {
    auto t = Clock::now();
    for (int s = 0; s < per_round; ++s) step();
    sync();
    times.push_back(since(t) / double(per_round));
    if (o.between_rounds) o.between_rounds();
  }
  std::sort(times.begin(), times.end());
  r.rounds = rounds;
  r.steps_per_round = per_round;
  r.median_s = times[times.size() / 2];
  r.min_s = times.front();
  r.max_s = times.back();
  return r;
}

CallTiming time_calls(const std::function<void()>& call, const std::function<void()>& sync,
                      double seconds) {
  for (int i = 0; i < 3; ++i) call();
  sync();
  auto t = Clock::now();
  call();
  sync();
  double est = std::max(since(t), 1e-7);
  int n = int(std::clamp(seconds / est, 10.0, 2000.0));
  std::vector<double> times;
  times.reserve(size_t(n));
  for (int i = 0; i < n; ++i) {
    auto c = Clock::now();
    call();
    sync();
    times.push_back(since(c));
  }
  std::sort(times.begin(), times.end());
  return {times[times.size() / 2], times.front(), n};
}

FreightMeasurement measure_freight(const nn::ModelSpec& spec, int64_t batch, Device dev,
                                   int threads, const TimingOptions& o, bool latency) {
  struct ThreadsGuard {  // restores the thread count, also when a row throws
    int previous = num_threads();
    ~ThreadsGuard() { set_num_threads(previous); }
  } guard;
  if (threads > 0) set_num_threads(threads);
  FreightMeasurement m;
  {
    empty_cache(dev);
    reset_peak_memory(dev);
    manual_seed(0);
    nn::ModulePtr model = nn::build_model(spec);
    model->to(dev);
    model->train();
    auto opt = make_optimizer("sgd", model->parameters(), 0.01, 0.9, 0.0);
    opt->set_fused_backward(nn::fusion_enabled());  // as freight train runs it
    auto input = [&](int64_t n, Generator& g) {
      Shape s{n};
      s.insert(s.end(), spec.input_shape.begin(), spec.input_shape.end());
      return spec.input_dtype == DType::I64
                 ? Tensor::randint(s, 0, spec.vocab > 0 ? spec.vocab : spec.classes, dev, &g)
                 : Tensor::normal(s, 0, 1, DType::F32, dev, &g);
    };
    Generator g(1);
    Tensor x = input(batch, g);
    Shape ys{batch};
    if (spec.task == "language_model") ys = x.shape();
    Tensor y = Tensor::randint(ys, 0, spec.classes, dev, &g);
    m.forward_flops = model->flops(x.shape());
    m.step_flops = training_flops(*model, x.shape());
    auto step = [&] {
      opt->zero_grad();
      Tensor loss = model_loss(spec, (*model)(x), y);
      loss.backward();
      opt->step();
    };
    auto sync = [&] { synchronize(dev); };
    m.step = time_steps(step, sync, o);
    m.peak_memory = memory_stats(dev).peak;
    if (latency && !m.step.skipped) {
      Tensor x1 = input(1, g);
      model->eval();
      NoGradGuard no_grad;
      m.latency = time_calls([&] { (void)(*model)(x1); }, sync, o.latency_seconds);
      m.has_latency = true;
    }
  }
  empty_cache(dev);
  return m;
}

}  // namespace freight::bench
