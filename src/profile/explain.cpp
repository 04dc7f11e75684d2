// explain(): profiled training steps of a zoo model, attributed to layers and phases.
#include "freight/explain.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <numeric>
#include <unordered_map>

#include "freight/autograd.h"
#include "freight/error.h"
#include "freight/nn/container.h"
#include "freight/nn/model_file.h"
#include "freight/profiler.h"
#include "freight/random.h"
#include "freight/runtime.h"
#include "freight/settings.h"
#include "freight/training.h"
#include "profile/model_settings.h"

namespace freight {

namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Per-step measurements of one profiled step.
struct StepTimes {
  std::vector<double> fwd, bwd, nodes;  // per row
  double engine = 0, copy = 0, optimizer = 0, sync = 0, wall = 0;
};

// The hooks: a stack of open layer spans for forward (exclusive time = the span minus the spans
// of the layers nested in it), node spans for backward, and the backward pass's own span.
class StepProfiler final : public ProfileHooks {
 public:
  StepProfiler(Device device, const std::unordered_map<const void*, size_t>& rows, size_t untagged)
      : device_(device), rows_(rows), untagged_(untagged) {}

  void start(StepTimes* t) {
    t_ = t;
    frames_.clear();
  }

  void layer_enter(const void* layer) override {
    sync();
    frames_.push_back({row(layer), Clock::now(), 0.0});
  }
  void layer_exit(const void*) override {
    sync();
    auto now = Clock::now();
    if (frames_.empty()) return;
    Frame f = frames_.back();
    frames_.pop_back();
    double inclusive = seconds(f.start, now);
    t_->fwd[f.row] += inclusive - f.children;
    if (!frames_.empty()) frames_.back().children += inclusive;
  }
  void backward_begin() override {
    sync();
    backward_start_ = Clock::now();
    in_nodes_ = 0;
  }
  void node_begin(const void*, const char*) override {
    sync();
    node_start_ = Clock::now();
  }
  void node_end(const void* layer, const char*) override {
    sync();
    double dt = seconds(node_start_, Clock::now());
    size_t r = row(layer);
    t_->bwd[r] += dt;
    t_->nodes[r] += 1;
    in_nodes_ += dt;
  }
  void backward_end() override {
    sync();
    t_->engine += seconds(backward_start_, Clock::now()) - in_nodes_;
  }

  // An error met while synchronising inside a hook (hooks must not throw), rethrown here.
  void rethrow() {
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  }

 private:
  struct Frame {
    size_t row;
    Clock::time_point start;
    double children;
  };
  size_t row(const void* tag) const {
    auto it = rows_.find(tag);
    return it == rows_.end() ? untagged_ : it->second;
  }
  void sync() {
    if (device_.is_cpu()) return;
    try {
      synchronize(device_);
    } catch (...) {
      if (!error_) error_ = std::current_exception();
    }
  }

  Device device_;
  const std::unordered_map<const void*, size_t>& rows_;
  size_t untagged_;
  StepTimes* t_ = nullptr;
  std::vector<Frame> frames_;
  Clock::time_point backward_start_, node_start_;
  double in_nodes_ = 0;
  std::exception_ptr error_;
};

// Installs the hooks for a scope (and always removes them).
struct HooksInstalled {
  explicit HooksInstalled(ProfileHooks* h) { set_profile_hooks(h); }
  ~HooksInstalled() { set_profile_hooks(nullptr); }
};

}  // namespace

double roofline_rate(const ExplainRow& row, const DevicePeaks& peaks) {
  if (row.bytes <= 0) return peaks.fp32_flops;
  return peaks.roof(row.intensity(), row.working_set);
}

std::string bound_by(const ExplainRow& row, const DevicePeaks& peaks) {
  double compute = peaks.fp32_flops > 0 ? row.flops / peaks.fp32_flops : 0;
  double bw = peaks.bandwidth_for(row.working_set);
  double memory = bw > 0 ? row.bytes / bw : 0;
  double overhead = row.ops * peaks.op_s;
  if (compute == 0 && memory == 0) return overhead > 0 ? "overhead" : "-";
  if (overhead > std::max(compute, memory)) return "overhead";
  return compute >= memory ? "compute" : "memory";
}

std::string beyond_roof_note(const ExplainResult& r) {
  // Faster than the compute roof only: a memory-bound row past its bandwidth roof read more from
  // a cache than the working-set model gives it, another story.
  if (r.peaks.fp32_flops <= 0) return "";
  int beyond = 0;
  const ExplainRow* fastest = nullptr;
  double most = 1;
  for (const ExplainRow& row : r.rows) {
    if (row.kind != "layer" || row.flops <= 0 || row.time() <= 0) continue;
    const double share = row.rate() / r.peaks.fp32_flops;
    if (share <= 1) continue;
    ++beyond;
    if (share > most) most = share, fastest = &row;
  }
  if (!fastest) return "";
  return fmt::format(
      "{} {} faster than the GEMM peak (up to {:.0f}%, layer {}: {}): a layer's FLOPs count its "
      "direct sums, 2 per multiply-add, and its kernel may need fewer (3x3 stride-1 "
      "convolutions of 16 or more channels run on Winograd kernels: Freight's F(2x2, 3x3) with "
      "the avx2 kernels, 2.25 times fewer multiplies; oneDNN's F(4x4, 3x3) from 32 channels on "
      "AVX-512 CPUs, a quarter) or run faster than the GEMM that measured the peak",
      beyond, beyond == 1 ? "layer runs" : "layers run", 100 * most, fastest->name,
      fastest->describe);
}

ExplainResult explain(const ExplainOptions& o) {
  FREIGHT_CHECK(o.warmup >= 0, fmt::format("--warmup must be >= 0 (got {})", o.warmup));
  FREIGHT_CHECK(o.min_steps >= 1, fmt::format("--steps must be >= 1 (got {})", o.min_steps));
  check_setting("--threads", int64_t(o.threads), limits::threads);
  if (o.threads > 0) set_num_threads(o.threads);
  ExplainResult res;
  res.device = resolve_device(o.device);
  nn::ModelSpec spec = nn::load_model_spec(o.model);
  profile::ModelSettings settings = profile::model_settings(spec, o.batch_size, "");
  res.model = spec.name;
  res.batch_size = settings.batch_size;
  res.optimizer = settings.optimizer;
  res.peaks = peaks_for(res.device);

  manual_seed(o.seed);
  nn::ModulePtr model = nn::build_model(spec);
  model->to(res.device);
  model->train();
  auto opt = make_optimizer(settings.optimizer, model->parameters(), settings.lr, settings.momentum,
                            settings.weight_decay);
  opt->set_fused_backward(nn::fusion_enabled());  // as freight train runs it

  // A fixed synthetic batch of the model's input shape, kept on the host: each step copies it
  // to the device, as a loader's batch would be.
  Shape xs{res.batch_size};
  xs.insert(xs.end(), spec.input_shape.begin(), spec.input_shape.end());
  Generator gen(o.seed + 1);
  Tensor x_host =
      spec.input_dtype == DType::I64
          ? Tensor::randint(xs, 0, spec.vocab > 0 ? spec.vocab : spec.classes, Device::cpu(), &gen)
          : Tensor::normal(xs, 0, 1, DType::F32, Device::cpu(), &gen);
  Shape ys{res.batch_size};
  if (spec.task == "language_model") ys = xs;
  Tensor y_host = Tensor::randint(ys, 0, spec.classes, Device::cpu(), &gen);

  // Rows: the model's modules (every module's tag maps to its row; modules below a layer costed
  // as a whole map to that layer), the loss, then the phases.
  std::vector<LayerCost> costs = layer_costs(*model, xs);
  std::unordered_map<const void*, size_t> row_of;
  for (size_t i = 0; i < costs.size(); ++i) row_of[costs[i].tag] = i;
  for (size_t i = 0; i < costs.size(); ++i) {
    if (costs[i].container) continue;
    // Descendants of a leaf-costed container inherit its row.
    std::vector<const nn::Module*> stack;
    for (const auto& [cname, child] :
         static_cast<const nn::Module*>(costs[i].tag)->named_children())
      stack.push_back(child.get());
    while (!stack.empty()) {
      const nn::Module* m = stack.back();
      stack.pop_back();
      row_of.emplace(m, i);
      for (const auto& [cname, child] : m->named_children()) stack.push_back(child.get());
    }
  }
  int loss_tag_storage = 0;
  const void* loss_tag = &loss_tag_storage;
  size_t n_layers = costs.size();
  LayerCost lc = loss_cost(model->output_shape(xs), spec.classes);
  row_of[loss_tag] = n_layers;
  size_t untagged = n_layers + 1;
  size_t n_rows = n_layers + 2;

  int64_t updated_in_backward = 0;  // parameters whose update ran inside backward
  auto step = [&](StepProfiler* prof, StepTimes* t) {
    auto t0 = Clock::now();
    Tensor x = x_host.to(res.device), y = y_host.to(res.device);
    synchronize(res.device);
    auto t1 = Clock::now();
    opt->zero_grad();
    auto t2 = Clock::now();
    Tensor loss;
    {
      HooksInstalled hooks(prof);
      Tensor out = (*model)(x);
      {
        LayerScope scope(loss_tag);
        loss = model_loss(spec, out, y);
      }
      loss.backward();
    }
    auto t3 = Clock::now();
    updated_in_backward = opt->updated_in_backward();
    opt->step();
    synchronize(res.device);
    auto t4 = Clock::now();
    double l = loss.item();
    auto t5 = Clock::now();
    FREIGHT_CHECK(std::isfinite(l), fmt::format("explain {}: the loss is {} (training diverged "
                                                "on random data at the model's learning rate)",
                                                spec.name, l));
    if (t) {
      t->copy += seconds(t0, t1);
      t->optimizer += seconds(t1, t2) + seconds(t3, t4);
      t->sync += seconds(t4, t5);
      t->wall = seconds(t0, t5);
    }
    return seconds(t0, t5);
  };

  for (int i = 0; i < o.warmup; ++i) step(nullptr, nullptr);

  if (!o.data.empty()) res.data = measure_data_cost(o.data, spec, res.batch_size, o.seed);
  res.contention = host_contention(0.1);
  if (res.device.is_cpu()) res.cache_sharing_start = measure_cache_sharing();
  StepProfiler prof(res.device, row_of, untagged);
  std::vector<StepTimes> steps;
  std::vector<double> plain;
  double total = 0;
  while (int(steps.size()) < o.max_steps &&
         (int(steps.size()) < o.min_steps || total < o.min_seconds)) {
    StepTimes t;
    t.fwd.assign(n_rows, 0.0);
    t.bwd.assign(n_rows, 0.0);
    t.nodes.assign(n_rows, 0.0);
    prof.start(&t);
    step(&prof, &t);
    prof.rethrow();
    total += t.wall;
    steps.push_back(std::move(t));
    // An unprofiled step after each profiled one, the reference for the profiling overhead:
    // interleaved, so both kinds see the same load from elsewhere.
    plain.push_back(step(nullptr, nullptr));
  }
  if (res.device.is_cpu()) res.cache_sharing_end = measure_cache_sharing();
  res.steps_measured = int(steps.size());
  // The faster half (at least one): a step slowed by another process's burst says nothing about
  // this model.
  std::sort(steps.begin(), steps.end(),
            [](const StepTimes& a, const StepTimes& b) { return a.wall < b.wall; });
  size_t keep = std::max<size_t>(1, (steps.size() + 1) / 2);
  steps.resize(keep);
  res.steps_kept = int(keep);
  double k = double(keep);
  std::sort(plain.begin(), plain.end());
  plain.resize(keep);  // the same faster half of the unprofiled steps
  res.unprofiled_step_s = std::accumulate(plain.begin(), plain.end(), 0.0) / k;
  auto mean = [&](auto get) {
    double s = 0;
    for (const StepTimes& t : steps) s += get(t);
    return s / k;
  };

  double attributed = 0;
  ExplainRow containers;  // containers without arithmetic of their own, merged into one row
  containers.name = "(containers)";
  containers.describe = "module calls between layers";
  containers.kind = "layer";
  for (size_t i = 0; i < n_rows; ++i) {
    ExplainRow r;
    r.fwd_s = mean([&](const StepTimes& t) { return t.fwd[i]; });
    r.bwd_s = mean([&](const StepTimes& t) { return t.bwd[i]; });
    r.nodes = mean([&](const StepTimes& t) { return t.nodes[i]; });
    const LayerCost* c = i < n_layers ? &costs[i] : i == n_layers ? &lc : nullptr;
    if (c) {
      r.name = c->name;
      r.describe = c->describe;
      r.kind = i == n_layers ? "loss" : "layer";
      r.flops = c->flops();
      r.bytes = c->bytes();
      r.working_set = std::max(c->fwd_bytes, c->bwd_bytes);
      r.ops = c->fwd_ops + c->bwd_ops;
    } else {
      r.name = "(untagged ops)";
      r.describe = "ops recorded outside any layer";
      r.kind = "layer";
      if (r.time() == 0) continue;
    }
    attributed += r.time();
    res.forward_s += r.fwd_s;
    res.backward_s += r.bwd_s;
    if (c && i < n_layers && c->container && c->fwd_flops == 0 && c->bwd_flops == 0) {
      containers.fwd_s += r.fwd_s;
      containers.bwd_s += r.bwd_s;
      containers.nodes += r.nodes;
      continue;
    }
    res.rows.push_back(r);
  }
  if (containers.time() > 0) res.rows.push_back(containers);
  auto phase = [&](const std::string& name, const std::string& describe, const std::string& kind,
                   double s, double* total_field) {
    ExplainRow r;
    r.name = name;
    r.describe = describe;
    r.kind = kind;
    r.fwd_s = s;
    *total_field = s;
    attributed += s;
    res.rows.push_back(r);
    return &res.rows.back();
  };
  phase("autograd engine", "graph walk and scheduling between backward nodes", "engine",
        mean([](const StepTimes& t) { return t.engine; }), &res.engine_s);
  res.backward_s += res.engine_s;
  // Weights updated inside their layer's backward (Optimizer::set_fused_backward) cost the step
  // nothing here: their update's time is in that layer's backward.
  const int64_t all_params = model->num_parameters();
  LayerCost oc =
      optimizer_cost(settings.optimizer, settings.momentum, all_params - updated_in_backward);
  std::string opt_describe = oc.describe + " step and zero_grad";
  if (updated_in_backward > 0)
    opt_describe += fmt::format(
        " ({:.1f}M of the {:.1f}M parameters updated in their layers' "
        "backward)",
        double(updated_in_backward) / 1e6, double(all_params) / 1e6);
  ExplainRow* opt_row =
      phase("optimizer", opt_describe, "optimizer",
            mean([](const StepTimes& t) { return t.optimizer; }), &res.optimizer_s);
  opt_row->flops = oc.flops();
  opt_row->bytes = oc.bytes();
  opt_row->working_set = oc.fwd_bytes;
  opt_row->ops = oc.fwd_ops;
  phase("host-to-device copy",
        res.device.is_cpu() ? "none: the batch is already in host memory"
                            : "the batch's inputs and labels",
        "copy", mean([](const StepTimes& t) { return t.copy; }), &res.copy_s);
  phase("sync and loss read", "waiting for the device and reading the loss back", "sync",
        mean([](const StepTimes& t) { return t.sync; }), &res.sync_s);

  res.step_s = mean([](const StepTimes& t) { return t.wall; });
  res.other_s = std::max(0.0, res.step_s - attributed);
  ExplainRow other;
  other.name = "other";
  other.describe = "unattributed: driver code between the measured spans, timer overhead";
  other.kind = "other";
  other.fwd_s = res.other_s;
  res.rows.push_back(other);
  res.attributed = res.step_s > 0 ? std::min(1.0, attributed / res.step_s) : 0;
  for (const ExplainRow& r : res.rows) res.overhead_est_s += r.ops * res.peaks.op_s;
  return res;
}

}  // namespace freight
