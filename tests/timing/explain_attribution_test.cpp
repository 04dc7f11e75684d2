// freight explain's step time and per-layer attribution against the test's own clock: the same
// model and batch timed through the public API. A timing test, so it runs alone on the machine
// (the timing suite is RUN_SERIAL): a test running beside it would take cores from one side of
// the comparison only.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>

#include "common/test_util.h"
#include "freight/explain.h"
#include "freight/nn/model_file.h"
#include "freight/random.h"
#include "freight/runtime.h"
#include "freight/training.h"

namespace freight {
namespace {

namespace fs = std::filesystem;

// A private peaks cache for the suite, measured once (explain reads it).
class Explain : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    peaks_file_ = new test::ScopedPeaksFile("explain_attribution_test");
    measure_peaks(Device::cpu());
  }
  static void TearDownTestSuite() { delete peaks_file_; }
  static fs::path dir() { return peaks_file_->dir(); }
  static test::ScopedPeaksFile* peaks_file_;
};
test::ScopedPeaksFile* Explain::peaks_file_ = nullptr;

// Layers whose costs differ by large factors, so that rankings and shares survive a loaded
// machine. Per sample and training step, Linear(1024, 1024) does 2M multiply-adds (forward and
// the weight gradient; its input is data, so no input gradient), Linear(1024, 128) 3 x 128K
// (forward, input and weight gradients: 1/5 of the first, a tenth to a sixth of the time) and
// Linear(128, 10) 3 x 1280 (1/100 of that; mostly call overhead).
constexpr const char* kLopsidedModel = R"({
  "name": "lopsided",
  "description": "three linear layers of very different costs",
  "input": {"shape": [1024]},
  "classes": 10,
  "layers": [
    {"type": "linear", "out": 1024}, {"type": "relu"},
    {"type": "linear", "out": 128}, {"type": "relu"},
    {"type": "linear", "out": 10}
  ],
  "train": {"batch_size": 64, "optimizer": "sgd", "lr": 0.01, "momentum": 0.9}
})";
const char* const kLinearRows[] = {"0", "2", "4"};  // the linear layers' names in the model

using Clock = std::chrono::steady_clock;

// The lower quartile of `repeats` runs of `timed` (seconds) after `warmup` runs; `untimed` runs
// before each (gradients dropped, so that every run does the same work). Not the median: on a
// loaded machine other processes only ever add time, and more of it to a longer run (it spans
// more of the scheduler's time slices), which skews a median toward the heavy layers; explain
// keeps the faster half of its steps for the same reason.
template <class Timed, class Untimed>
double lower_quartile_seconds(int warmup, int repeats, Untimed&& untimed, Timed&& timed) {
  for (int i = 0; i < warmup; ++i) untimed(), timed();
  std::vector<double> s;
  for (int i = 0; i < repeats; ++i) {
    untimed();
    auto t0 = Clock::now();
    timed();
    s.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  std::sort(s.begin(), s.end());
  return s[s.size() / 4];
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// One training step cut at every layer boundary: each layer runs on a detached copy of its input
// (requiring a gradient, but for the first layer, whose input is data as in the model), and the
// backward pass is run by hand, layer by layer, from the gradient that reached the next layer's
// input. The gradients and the update are the step's own, so each layer runs in the cache state
// of a real step; the test's clock times each layer's forward and backward alone. Appends each
// layer's seconds to `times[name]`.
void segmented_step(nn::Module& model, optim::Optimizer& opt, const Tensor& x, const Tensor& y,
                    std::map<std::string, std::vector<double>>& times) {
  struct Cut {
    std::string name;
    Tensor in, out;
    double fwd_s;
  };
  opt.zero_grad();
  std::vector<Cut> cuts;
  Tensor h = x;
  for (const auto& [name, layer] : model.named_children()) {
    Tensor in = h.detach();
    if (!cuts.empty()) in.set_requires_grad(true);
    auto t0 = Clock::now();
    h = (*layer)(in);
    cuts.push_back({name, in, h, seconds_since(t0)});
  }
  Tensor out = h.detach();
  out.set_requires_grad(true);
  cross_entropy(out, y).backward();
  Tensor g = out.grad();
  for (size_t k = cuts.size(); k-- > 0;) {
    auto t0 = Clock::now();
    cuts[k].out.backward(g);
    times[cuts[k].name].push_back(cuts[k].fwd_s + seconds_since(t0));
    if (k > 0) g = cuts[k].in.grad();
  }
  opt.step();
}

// What the test measures itself, with its own model, batch and clock: a whole training step,
// its forward and backward passes, and each layer's forward and backward within a step.
struct OwnMeasurement {
  double step_s = 0, forward_backward_s = 0;
  std::map<std::string, double> layer_s;
};

OwnMeasurement measure_lopsided(const std::string& path, int64_t batch) {
  constexpr int kWarmup = 3, kRepeats = 21;
  OwnMeasurement m;
  nn::ModelSpec spec = nn::load_model_spec(path);
  manual_seed(7);
  nn::ModulePtr model = nn::build_model(spec);
  model->train();
  auto opt = make_optimizer("sgd", model->parameters(), 0.01, 0.9, 0);
  Generator gen(8);
  Tensor x = Tensor::normal({batch, 1024}, 0, 1, DType::F32, Device::cpu(), &gen);
  Tensor y = Tensor::randint({batch}, 0, 10, Device::cpu(), &gen);
  m.step_s = lower_quartile_seconds(
      kWarmup, kRepeats, [] {},
      [&] {
        opt->zero_grad();
        Tensor loss = cross_entropy((*model)(x), y);
        loss.backward();
        opt->step();
        (void)loss.item();
      });
  m.forward_backward_s = lower_quartile_seconds(
      kWarmup, kRepeats, [&] { opt->zero_grad(); },
      [&] { cross_entropy((*model)(x), y).backward(); });
  std::map<std::string, std::vector<double>> times;
  for (int i = 0; i < kWarmup; ++i) segmented_step(*model, *opt, x, y, times);
  times.clear();
  for (int i = 0; i < kRepeats; ++i) segmented_step(*model, *opt, x, y, times);
  for (auto& [name, s] : times) {
    std::sort(s.begin(), s.end());
    m.layer_s[name] = s[s.size() / 4];
  }
  return m;
}

const ExplainRow& row_named(const ExplainResult& r, const std::string& name) {
  for (const ExplainRow& row : r.rows)
    if (row.kind == "layer" && row.name == name) return row;
  throw Error(fmt::format("explain has no layer row named '{}'", name));
}

// explain's step time and per-layer attribution against the test's own timings of the same
// model, batch and thread count. One thread: on a 2-core machine running other tests, a second
// thread's share of the cores comes and goes. The bounds are ratios, loose enough for a loaded
// machine (a factor of 2 on times of the same work measured seconds apart, 3 on a layer's share:
// a small layer's time moves most with what other processes leave of the caches);
// the layers are compared by rank and by share, across factors of 5 and more in cost. Two layers'
// rows swapped, or a layer's time booked to a neighbour, fail them.
TEST_F(Explain, ExplainAgreesWithItsOwnMeasurement) {
  fs::path model = dir() / "lopsided.json";
  std::ofstream(model) << kLopsidedModel;
  ExplainOptions o;
  o.model = model.string();
  o.device = "cpu";
  o.threads = 1;
  o.warmup = 3;
  o.min_steps = 20;
  o.min_seconds = 0.3;
  o.max_steps = 40;
  // Rounds of explain then the test's own measurement, each pair seconds apart, and the median
  // over the rounds: a machine shared with other tests can run this process at half speed for
  // a second or two, and a slow spell then spoils one round, not the comparison.
  constexpr int kRounds = 5;
  std::vector<double> unprofiled_ratio, profiled_ratio, phases_ratio;
  std::map<std::string, std::vector<double>> own_layer, explain_layer;
  for (int round = 0; round < kRounds; ++round) {
    ExplainResult r = explain(o);
    ASSERT_GT(r.step_s, 0);
    set_num_threads(1);
    OwnMeasurement own = measure_lopsided(model.string(), r.batch_size);
    unprofiled_ratio.push_back(r.unprofiled_step_s / own.step_s);
    profiled_ratio.push_back(r.step_s / own.step_s);
    phases_ratio.push_back((r.forward_s + r.backward_s) / own.forward_backward_s);
    for (const auto& [name, s] : own.layer_s) {
      own_layer[name].push_back(s);
      explain_layer[name].push_back(row_named(r, name).time());
    }
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  auto within = [](double got, double want, double factor) {
    return got >= want / factor && got <= want * factor;
  };
  std::map<std::string, double> own_s, explain_s;  // per layer, the median over the rounds
  for (const auto& [name, v] : own_layer) {
    own_s[name] = median(v);
    explain_s[name] = median(explain_layer[name]);
  }

  // The whole step and its forward and backward passes (explain / the test's clock).
  EXPECT_PRED3(within, median(unprofiled_ratio), 1.0, 2.0) << "explain's unprofiled step";
  EXPECT_PRED3(within, median(profiled_ratio), 1.0, 2.0) << "explain's profiled step";
  EXPECT_PRED3(within, median(phases_ratio), 1.0, 2.0) << "explain's forward and backward";

  // The layers: the heaviest by the test's clock is explain's heaviest...
  auto heaviest = [](const std::map<std::string, double>& t) {
    return std::max_element(t.begin(), t.end(),
                            [](auto& a, auto& b) { return a.second < b.second; })
        ->first;
  };
  ASSERT_EQ(heaviest(own_s), "0") << "the model does not have the costs it was designed for";
  EXPECT_EQ(heaviest(explain_s), "0");
  // ...every pair of layers (ReLUs too) whose measured times differ by 5x or more, the larger
  // taking at least 5% of the layers' time, is in the same order in explain (below 5%, both
  // are a few microseconds and their order is noise)...
  double own_layers_s = 0;
  for (const auto& [name, s] : own_s) own_layers_s += s;
  for (const auto& [a, sa] : own_s) {
    for (const auto& [b, sb] : own_s) {
      if (sa >= 5 * sb && sa >= 0.05 * own_layers_s) {
        EXPECT_GT(explain_s[a], explain_s[b])
            << "layer " << a << " measured " << sa << " s, layer " << b << " " << sb << " s";
      }
    }
  }
  // ...and each linear layer that takes at least 5% of the three has about its measured share
  // of them (within 3x).
  double own_total = 0, explain_total = 0;
  for (const char* n : kLinearRows) {
    own_total += own_s[n];
    explain_total += explain_s[n];
  }
  for (const char* n : kLinearRows) {
    double own_share = own_s[n] / own_total, explain_share = explain_s[n] / explain_total;
    if (own_share >= 0.05) {
      EXPECT_PRED3(within, explain_share, own_share, 3.0) << "the share of layer " << n;
    }
  }
}

// Needs no peaks: the device is resolved first.
}  // namespace
}  // namespace freight
