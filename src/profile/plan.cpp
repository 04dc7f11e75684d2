// plan(): predicted epoch time and memory per device (see freight/plan.h for the model).
#include "freight/plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "freight/error.h"
#include "freight/nn/model_file.h"
#include "freight/random.h"
#include "freight/runtime.h"
#include "freight/unary_ops.h"
#include "profile/model_settings.h"

namespace freight {

namespace {

constexpr double kF32 = 4.0;

// Work the training loop does per step besides the model: zero_grad, reading the loss back, the
// accuracy count (argmax, labels to the host), the schedule. Counted as tiny ops.
constexpr double kLoopOps = 4.0;

struct Terms {
  double compute = 0, memory = 0, overhead = 0;
};

// One direction of one layer: its roofline time, divided by the measured efficiency of Freight's
// kernel for the layer type, goes to compute or memory (whichever bounds it); its kernel calls
// go to overhead.
void add_terms(Terms& t, double flops, double bytes, double gemms, double ops, double op_cost,
               double efficiency, const DevicePeaks& p) {
  double c = (p.fp32_flops > 0 ? flops / p.fp32_flops : 0) + gemms * p.gemm_overhead_s;
  double bw = p.bandwidth_for(bytes);  // the cache level this direction's bytes fit in
  double m = bw > 0 ? bytes / bw : 0;
  double time = std::max(c, m) / std::max(efficiency, 1e-3);
  if (c >= m)
    t.compute += time;
  else
    t.memory += time;
  t.overhead += ops * op_cost;
}

// Whether a layer's backward reads its input (which then stays alive until the backward), or
// its output. What Freight's ops keep: linear, conv2d, batch norm and the LSTM their input; an
// activation what its descriptor row says (freight/unary_ops.h: relu, sigmoid and tanh their
// output, relu the sign of it; gelu and silu their input); pooling only indices (max) or nothing
// (average); dropout its byte mask; views nothing of their own. A ReLU fused into a batch norm
// keeps nothing (the batch norm recomputes its sign from its own input), nor one fused into a
// max pooling before or after it (the pooling's indices carry its mask); one fused into a
// convolution or a residual block has the layer keep its output instead; one fused into an
// average pooling keeps its input (the mask's source), as much as it would have kept of its
// output.
bool keeps_input(const LayerCost& c) {
  if (c.fused_keeps_input) return true;
  static const char* const kTypes[] = {"Linear",      "Conv2d", "BatchNorm1d",
                                       "BatchNorm2d", "LSTM",   "Embedding"};
  for (const char* t : kTypes)
    if (c.type == t) return true;
  const UnaryOpInfo* act = activation_by_layer(c.type);
  return act && act->saves == UnarySaves::Input;
}
bool keeps_output(const LayerCost& c) {
  if (c.keeps_fused_output) return true;
  const UnaryOpInfo* act = activation_by_layer(c.type);
  return !c.fused && act && act->saves == UnarySaves::Output;
}
bool is_view(const LayerCost& c) {
  return c.type == "Flatten" || c.type == "Reshape" || c.type == "LastStep";
}

// Bytes kept alive for backward: each leaf's output that its own backward or the next leaf's
// reads (keeps_output, keeps_input; a view passes its input through), max pooling's indices,
// the LSTM's gates and cell states, dropout masks; plus the gradients in flight at the peak of
// backward: the largest of a layer's output gradient and input gradient together, over the
// layers that run a backward of their own (not views, not a ReLU fused into a neighbour). Leaves
// are taken in forward order, so in a residual block the shortcut is approximated as the body's
// next layer. A layer whose kernels on `device` take a workspace while a pass runs (a
// convolution's unrolled chunks, oneDNN's blocked copies: nn::Module::workspace_bytes) holds it
// beside that layer's gradients.
double activation_bytes(const std::vector<LayerCost>& layers, double batch_bytes, Device device) {
  std::vector<const LayerCost*> leaves;
  for (const LayerCost& c : layers)
    if (!(c.container && c.fwd_flops == 0)) leaves.push_back(&c);
  double total = batch_bytes, in_flight = 0;
  for (size_t i = 0; i < leaves.size(); ++i) {
    const LayerCost& c = *leaves[i];
    double out = kF32 * double(shape_numel(c.output));
    if (!is_view(c) && !c.fused) {
      const auto* module = static_cast<const nn::Module*>(c.tag);
      const double workspace =
          module ? double(module->workspace_bytes(c.input, device, c.input_grad)) : 0.0;
      in_flight = std::max(in_flight, out + kF32 * double(shape_numel(c.input)) + workspace);
    }
    size_t j = i + 1;
    while (j < leaves.size() && is_view(*leaves[j])) ++j;
    const bool last = j == leaves.size();  // the logits: read by the loss
    if (!is_view(c) && (last || keeps_output(c) || keeps_input(*leaves[j]))) total += out;
    if (c.type == "LSTM" && c.input.size() == 3) {
      // gates [B, T, 4H] and cells [B, T, H] per layer, as bytes() counts them
      total += c.fwd_bytes / 2;
    }
    if (c.type == "MaxPool2d") total += 4.0 * double(shape_numel(c.output));  // int32 indices
    if (c.type == "Dropout") total += double(shape_numel(c.output));
  }
  return total + in_flight;
}

std::string seconds_text(double s) {
  if (s < 1e-3) return fmt::format("{:.0f} µs", s * 1e6);
  if (s < 1) return fmt::format("{:.1f} ms", s * 1e3);
  if (s < 120) return fmt::format("{:.1f} s", s);
  if (s < 7200) return fmt::format("{:.1f} min", s / 60);
  return fmt::format("{:.1f} h", s / 3600);
}

std::string flops_text(double f) {
  if (f >= 1e12) return fmt::format("{:.1f} TFLOP", f / 1e12);
  if (f >= 1e9) return fmt::format("{:.1f} GFLOP", f / 1e9);
  return fmt::format("{:.0f} MFLOP", f / 1e6);
}

}  // namespace

double roofline_seconds(double flops, double bytes, double gemms, const DevicePeaks& p) {
  double c = (p.fp32_flops > 0 ? flops / p.fp32_flops : 0) + gemms * p.gemm_overhead_s;
  double bw = p.bandwidth_for(bytes);
  return std::max(c, bw > 0 ? bytes / bw : 0.0);
}

DevicePeaks reference_h100(const DevicePeaks& cpu) {
  DevicePeaks p;
  p.device = Device::cuda(0);
  p.name = "NVIDIA H100 SXM (datasheet figures, not measured)";
  p.fp32_flops = 67e12;
  p.tf32_flops = 495e12;
  p.bf16_flops = 989e12;
  p.mem_bandwidth = 3.35e12;
  p.h2d_pinned = p.d2h_pinned = 25e9;
  p.h2d_pageable = p.d2h_pageable = 10e9;
  p.launch_s = 5e-6;
  p.gemm_overhead_s = 5e-6;
  // The framework's host work per op (checks, allocation, the tape) is the CPU's; the launch
  // comes on top.
  p.op_s = cpu.op_s + p.launch_s;
  p.train_op_s = cpu.train_op_s + 2 * p.launch_s;
  return p;
}

DevicePlan plan_device(const PlanResult& shape, const std::vector<LayerCost>& layers,
                       const LayerCost& loss, const LayerCost& optimizer, double batch_bytes,
                       const DevicePeaks& p, int gpus) {
  DevicePlan d;
  d.peaks = p;
  d.gpus = gpus;
  d.label = gpus > 1 ? fmt::format("{} x cuda", gpus) : p.device.str();
  Terms t;
  double per_op = 0.5 * p.train_op_s;  // a kernel call in training: half a forward+backward op
  auto layer = [&](const LayerCost& c) {
    double e = p.efficiency_for(c.kernel);
    add_terms(t, c.fwd_flops, c.fwd_bytes, c.fwd_gemms, c.fwd_ops, per_op, e, p);
    add_terms(t, c.bwd_flops, c.bwd_bytes, c.bwd_gemms, c.bwd_ops, per_op, e, p);
  };
  for (const LayerCost& c : layers) layer(c);
  layer(loss);
  bool adam = shape.optimizer == "adam" || shape.optimizer == "adamw";
  add_terms(t, optimizer.fwd_flops, optimizer.fwd_bytes, 0, optimizer.fwd_ops, p.op_s,
            p.efficiency_for(adam ? "optimizer:adam" : "optimizer:sgd"), p);
  t.overhead += kLoopOps * p.op_s;
  d.compute_s = t.compute;
  d.memory_s = t.memory;
  d.overhead_s = t.overhead;
  if (p.device.is_cuda()) {
    double bw = p.h2d_pageable > 0 ? p.h2d_pageable : p.h2d_pinned;
    d.transfer_s = bw > 0 ? batch_bytes / bw : 0;
    d.sync_s = p.launch_s;  // the loss read back each step
  } else {
    // The loader normalises each batch on the host (read bytes, write floats).
    d.transfer_s = p.mem_bandwidth > 0 ? 2.0 * batch_bytes / p.mem_bandwidth : 0;
  }
  if (gpus > 1) {
    // Data parallel: each GPU takes 1/gpus of the batch; the per-op costs stay; the gradients
    // are all-reduced each step over the host link (a pessimistic bus: NVLink is faster).
    double bus = p.d2h_pinned > 0 ? p.d2h_pinned : 10e9;
    double allreduce = 2.0 * kF32 * double(shape.params) * double(gpus - 1) / double(gpus) / bus;
    d.compute_s /= gpus;
    d.memory_s /= gpus;
    d.transfer_s = d.transfer_s / gpus + allreduce;
  }
  d.step_s = d.compute_s + d.memory_s + d.overhead_s + d.transfer_s + d.sync_s;
  d.epoch_s = d.step_s * double(shape.steps_per_epoch);
  d.total_s = d.epoch_s * double(shape.epochs);
  double best = std::max({d.compute_s, d.memory_s, d.overhead_s, d.transfer_s});
  d.dominant = best == d.compute_s    ? "compute"
               : best == d.memory_s   ? "memory"
               : best == d.overhead_s ? "overhead"
                                      : "transfer";

  double params = kF32 * double(shape.params);
  d.params_bytes = params;
  d.grads_bytes = params;
  d.optimizer_bytes = shape.optimizer == "adam" || shape.optimizer == "adamw" ? 2 * params
                      : optimizer.fwd_bytes > 3.0 * params                    ? params
                                                                              : 0;
  d.activation_bytes = activation_bytes(layers, batch_bytes, p.device) / gpus;
  d.total_bytes = d.params_bytes + d.grads_bytes + d.optimizer_bytes + d.activation_bytes;
  return d;
}

namespace {
// Data parallel on GPUs, p = 1, 2, 4, ... up to nodes x gpus_per_node at the same global batch:
// each rank computes 1/p of the batch (its per-op costs stay whole), and the gradient's ring
// all-reduce runs on NVLink within a node, over InfiniBand once the ranks span nodes. NCCL sums
// on a stream of its own while backward runs, so backward (about 2/3 of the compute) hides as
// much of the sum as it lasts.
void plan_scaling(PlanResult& r, const PlanOptions& o) {
  const DevicePlan* base = nullptr;
  for (const DevicePlan& d : r.devices)
    if (d.peaks.device.is_cuda() && d.gpus == 1 && (!base || d.measured > base->measured))
      base = &d;
  FREIGHT_CHECK(base, "--nodes: no GPU to project (neither present nor the datasheet reference)");
  r.scaling_device = base->label;
  // Within a node: the NCCL link `freight devices --measure --nproc N` measured on this host's
  // GPUs when there is one (its latency and bus bandwidth beyond its own rank count), else
  // NVLink's datasheet figures.
  LinkPeaks intra = nvlink_h100();
  LinkPeaks measured;
  const bool have_measured = load_link("nccl, 1 host", peaks_cache_path(), measured);
  if (have_measured) intra = measured;
  r.scaling_links = fmt::format(
      "{} within a node, InfiniBand NDR between nodes (datasheet)",
      have_measured ? fmt::format("NCCL as measured on {} GPUs of this host", measured.ranks)
                    : std::string("NVLink (datasheet)"));
  const int total = o.nodes * o.gpus_per_node;
  const double bytes = kF32 * double(r.params);
  std::vector<int> ps;
  for (int p = 1; p < total; p *= 2) ps.push_back(p);
  ps.push_back(total);
  double step1 = 0;
  for (int p : ps) {
    ScalePoint s;
    s.gpus = p;
    s.nodes = (p + o.gpus_per_node - 1) / o.gpus_per_node;
    const double work = (base->compute_s + base->memory_s + base->transfer_s) / p;
    s.compute_s = work + base->overhead_s + base->sync_s;
    LinkPeaks link = s.nodes > 1 ? infiniband_ndr() : intra;
    s.comm_s = link.all_reduce_seconds(bytes, p);
    const double backward = work * 2.0 / 3.0;
    s.exposed_comm_s = std::max(0.0, s.comm_s - backward);
    s.step_s = s.compute_s + s.exposed_comm_s;
    s.epoch_s = s.step_s * double(r.steps_per_epoch);
    if (p == 1) step1 = s.step_s;
    s.speedup = step1 / s.step_s;
    s.efficiency = s.speedup / p;
    if (!r.comm_dominates_from && s.exposed_comm_s > s.compute_s) r.comm_dominates_from = p;
    r.scaling.push_back(s);
  }
}
}  // namespace

PlanResult plan(const PlanOptions& o) {
  FREIGHT_CHECK(o.samples > 0, fmt::format("--samples must be positive (got {})", o.samples));
  FREIGHT_CHECK(o.epochs > 0, fmt::format("--epochs must be positive (got {})", o.epochs));
  nn::ModelSpec spec = nn::load_model_spec(o.model);
  profile::ModelSettings s = profile::model_settings(spec, o.batch_size, o.optimizer);
  manual_seed(0);
  nn::ModulePtr model = nn::build_model(spec);

  PlanResult r;
  r.model = spec.name;
  r.samples = o.samples;
  r.epochs = o.epochs;
  r.batch_size = std::min(s.batch_size, o.samples);
  r.steps_per_epoch = (o.samples + r.batch_size - 1) / r.batch_size;
  r.optimizer = s.optimizer;
  r.params = model->num_parameters();

  Shape xs{r.batch_size};
  xs.insert(xs.end(), spec.input_shape.begin(), spec.input_shape.end());
  std::vector<LayerCost> layers = layer_costs(*model, xs);
  LayerCost loss = loss_cost(model->output_shape(xs), spec.classes);
  LayerCost opt = optimizer_cost(s.optimizer, s.momentum, r.params);
  r.optimizer_describe = opt.describe;
  Shape ys{r.batch_size};
  if (spec.task == "language_model") ys = xs;
  double batch_bytes = double(shape_numel(xs)) * double(dtype_size(spec.input_dtype)) +
                       8.0 * double(shape_numel(ys));
  for (const LayerCost& c : layers) {
    r.flops_per_step += c.flops();
    r.bytes_per_step += c.bytes();
    r.ops_per_step += c.fwd_ops + c.bwd_ops;
  }
  r.flops_per_step += loss.flops() + opt.flops();
  r.bytes_per_step += loss.bytes() + opt.bytes();
  r.ops_per_step += loss.fwd_ops + loss.bwd_ops + opt.fwd_ops;

  r.contention = host_contention(0.2);
  std::vector<DeviceInfo> infos = list_devices();
  DevicePeaks cpu_peaks = peaks_for(Device::cpu());
  DevicePlan cpu = plan_device(r, layers, loss, opt, batch_bytes, cpu_peaks);
  cpu.available_bytes = double(infos.front().memory_free);
  r.devices.push_back(cpu);
  int gpus = 0;
  for (const DeviceInfo& info : infos) {
    if (!info.device.is_cuda()) continue;
    DevicePlan g = plan_device(r, layers, loss, opt, batch_bytes, peaks_for(info.device));
    g.available_bytes = double(info.memory_total);
    r.devices.push_back(g);
    ++gpus;
  }
  if (gpus > 1) {
    DevicePlan many = plan_device(r, layers, loss, opt, batch_bytes, r.devices[1].peaks, gpus);
    many.available_bytes = r.devices[1].available_bytes;
    r.devices.push_back(many);
  }
  if (gpus == 0 && o.reference_gpu) {
    DevicePlan ref = plan_device(r, layers, loss, opt, batch_bytes, reference_h100(cpu_peaks));
    ref.label = "H100 (datasheet)";
    ref.measured = false;
    ref.available_bytes = 80.0 * double(1ull << 30);
    r.devices.push_back(ref);
  }
  if (o.ranks > 1) {
    // The CPU's ranks share this host: each runs the whole model on its shard of the batch
    // (the largest, ceil(B/N) rows) with its share of the cores, at the peaks measured with that
    // many threads, and all of them at once draw on one memory bus (each at most 1/N of what the
    // host's threads together reach). Each step then adds the gradient's sum over the ranks
    // (no overlap on a CPU: MPI moves the sum only inside its calls).
    LinkPeaks link;
    FREIGHT_CHECK(load_link("mpi, 1 host", peaks_cache_path(), link),
                  fmt::format("--ranks {}: no measured link between ranks; run `freight devices "
                              "--measure --nproc {}` first",
                              o.ranks, o.ranks));
    const int64_t rank_rows = (r.batch_size + o.ranks - 1) / o.ranks;
    Shape rxs = xs, rys = ys;
    rxs[0] = rys[0] = rank_rows;
    std::vector<LayerCost> rank_layers = layer_costs(*model, rxs);
    LayerCost rank_loss = loss_cost(model->output_shape(rxs), spec.classes);
    double rank_batch_bytes = double(shape_numel(rxs)) * double(dtype_size(spec.input_dtype)) +
                              8.0 * double(shape_numel(rys));
    const int host_threads = num_threads();
    const int rank_threads = std::max(1, host_threads / o.ranks);
    set_num_threads(rank_threads);
    DevicePeaks rank_peaks;
    try {
      rank_peaks = peaks_for(Device::cpu());
    } catch (...) {
      set_num_threads(host_threads);
      throw;
    }
    set_num_threads(host_threads);
    rank_peaks.mem_bandwidth =
        std::min(rank_peaks.mem_bandwidth, cpu_peaks.mem_bandwidth / double(o.ranks));
    DevicePlan d = plan_device(r, rank_layers, rank_loss, opt, rank_batch_bytes, rank_peaks);
    d.available_bytes = cpu.available_bytes / double(o.ranks);
    d.ranks = o.ranks;
    d.label = fmt::format("{} x cpu ranks", o.ranks);
    // The measurement sums one buffer over and over, so up to the caches' size it stays in
    // them; a step sums the gradient that backward wrote among the activations, from memory.
    // So no size sums faster than the largest one measured (beyond every cache) does per byte.
    const double grad_bytes = kF32 * double(r.params);
    d.comm_s = link.all_reduce_seconds(grad_bytes, o.ranks);
    if (link.measured && !link.times.empty() && link.ranks == o.ranks) {
      auto [largest, t_largest] = link.times.back();
      d.comm_s = std::max(d.comm_s, t_largest * grad_bytes / largest);
    }
    d.transfer_s += d.comm_s;
    d.step_s += d.comm_s;
    d.epoch_s = d.step_s * double(r.steps_per_epoch);
    d.total_s = d.epoch_s * double(r.epochs);
    if (d.comm_s > std::max({d.compute_s, d.memory_s, d.overhead_s})) d.dominant = "transfer";
    r.devices.push_back(d);
  }
  if (o.nodes > 0 && o.gpus_per_node > 0) plan_scaling(r, o);
  for (DevicePlan& d : r.devices)
    d.fits = d.available_bytes <= 0 || d.total_bytes <= d.available_bytes;

  // ---- the recommendation ----
  double flops_epoch = r.flops_per_step * double(r.steps_per_epoch);
  const DevicePlan* best_gpu = nullptr;
  const DevicePlan* multi = nullptr;
  for (const DevicePlan& d : r.devices) {
    if (!d.measured) continue;
    if (d.gpus > 1)
      multi = &d;
    else if (d.peaks.device.is_cuda() && d.fits && (!best_gpu || d.epoch_s < best_gpu->epoch_s))
      best_gpu = &d;
  }
  const DevicePlan* ref = nullptr;
  for (const DevicePlan& d : r.devices)
    if (!d.measured) ref = &d;
  std::string cpu_epoch = seconds_text(cpu.epoch_s);
  if (!best_gpu) {
    r.recommendation = "cpu";
    double ratio = ref ? cpu.epoch_s / ref->epoch_s : 1;
    if (ref && ratio >= 3 && cpu.total_s > 600) {
      r.reason = fmt::format(
          "{} per epoch: the CPU is predicted to take {} an epoch ({} in all); this task wants a "
          "GPU, and none is present here: an H100-class GPU would be about {:.0f}x faster ({} an "
          "epoch, a datasheet estimate)",
          flops_text(flops_epoch), cpu_epoch, seconds_text(cpu.total_s), ratio,
          seconds_text(ref->epoch_s));
    } else if (ref && ratio >= 3) {
      r.reason = fmt::format(
          "the CPU is enough: {} an epoch ({} in all, {} per epoch); a GPU like an H100 would "
          "be about {:.0f}x faster (datasheet estimate) but is not needed at this size",
          cpu_epoch, seconds_text(cpu.total_s), flops_text(flops_epoch), ratio);
    } else if (ref) {
      r.reason = fmt::format(
          "small model: per-op overhead dominates; the CPU finishes an epoch in {}, and a GPU "
          "like an H100 would not be much faster ({} an epoch, datasheet estimate: launches "
          "cost more than the arithmetic)",
          cpu_epoch, seconds_text(ref->epoch_s));
    } else {
      r.reason =
          fmt::format("no GPU is present; the CPU is predicted to take {} an epoch", cpu_epoch);
    }
    if (!cpu.fits)
      r.reason += fmt::format(
          "; note: it needs about {:.1f} GiB but only {:.1f} GiB are "
          "available, try a smaller --batch-size",
          cpu.total_bytes / double(1ull << 30), cpu.available_bytes / double(1ull << 30));
    return r;
  }
  double gain = cpu.epoch_s / best_gpu->epoch_s;
  if (gain < 1.2 && cpu.fits) {
    r.recommendation = "cpu";
    r.reason = fmt::format(
        "tiny model: {} dominates on the GPU; the CPU finishes an epoch in {}, the GPU would "
        "take {} (not faster)",
        best_gpu->dominant == "overhead" ? "launch overhead" : best_gpu->dominant, cpu_epoch,
        seconds_text(best_gpu->epoch_s));
    return r;
  }
  if (multi && multi->epoch_s < 0.6 * best_gpu->epoch_s && best_gpu->epoch_s > 60) {
    r.recommendation = "gpus";
    r.reason = fmt::format(
        "{} per epoch: one GPU is predicted {:.0f}x faster than the CPU ({} an epoch), and {} "
        "GPUs data-parallel about {:.1f}x faster again ({}); Freight itself trains on one GPU "
        "today",
        flops_text(flops_epoch), gain, seconds_text(best_gpu->epoch_s), multi->gpus,
        best_gpu->epoch_s / multi->epoch_s, seconds_text(multi->epoch_s));
    return r;
  }
  r.recommendation = "gpu";
  r.reason = fmt::format(
      "{} per epoch; the GPU is predicted {:.0f}x faster ({} an epoch against "
      "the CPU's {})",
      flops_text(flops_epoch), gain, seconds_text(best_gpu->epoch_s), cpu_epoch);
  return r;
}

}  // namespace freight
