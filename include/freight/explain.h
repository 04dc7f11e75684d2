// Where a training step's time goes, layer by layer and phase by phase, against the roofline of
// the device's measured peaks (freight/peaks.h): the library behind `freight explain`.
//
// Costs: a layer's forward FLOPs are Module::flops, its bytes Module::bytes (inputs, outputs and
// parameters touched); backward costs follow from the layer type (a layer with weights computes
// two products in backward, dX and dW, so twice its forward FLOPs; every backward reads the output
// gradient and the saved input and writes the input gradient and the parameter gradients).
//
// Timing: the step runs with profiling hooks installed (freight/profiler.h): each layer's forward
// time is the span of its Module call minus its children's, each backward node's time goes to the
// layer that recorded it, the autograd engine's own bookkeeping is what the backward pass spends
// outside nodes, and the driver times the host-to-device copies, the optimizer and the final
// read of the loss. On a GPU every span ends with a device synchronisation, so times are device
// times plus launch costs (the profiled step is slower than an unprofiled one; both are given).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "freight/device.h"
#include "freight/nn/model_file.h"
#include "freight/nn/module.h"
#include "freight/peaks.h"
#include "freight/shape.h"

namespace freight {

// ---------------------------------------------------------------- static costs
struct LayerCost {
  std::string name;      // path in the model: "3", "4.body.0"; "(model)" for the root
  std::string describe;  // "Linear(784, 512)"
  std::string type;      // "Linear"
  // The class of Freight kernel that runs it, for the measured efficiencies of
  // DevicePeaks::efficiency: the type, or a finer class where one type runs at very different
  // fractions of the roofline ("Conv2d:narrow": a convolution whose GEMM has a dimension of at
  // most 16, out channels or in channels x kernel area, as in a network's first layers;
  // "Conv2d:3x3": 3x3 at stride 1 with 16 or more channels in and out over 2048 or more output
  // pixels, which the CPU runs as a Winograd).
  std::string kernel;
  const void* tag = nullptr;        // the module (its LayerScope tag)
  bool container = false;           // a module with children (its own cost excludes theirs)
  bool fused = false;               // runs inside a neighbouring layer (nn::fused_pair): no cost
  bool fused_keeps_input = false;   // fused, and its partner keeps its input for backward (a
                                    // ReLU in an average pooling: relu's mask, from the input)
  bool keeps_fused_output = false;  // keeps its own output for the backward of a ReLU fused
                                    // into it (a convolution's or a residual block's: the mask)
  bool input_grad = true;  // its input needs a gradient (false for the data and what follows
                           // it up to the first weights: autograd computes no dX there)
  Shape input, output;
  int64_t params = 0;  // own parameters (not the children's)
  double fwd_flops = 0, bwd_flops = 0;
  double fwd_bytes = 0, bwd_bytes = 0;
  // Estimated kernel calls (each pays the per-op dispatch or launch cost), and of those, GEMMs
  // (each pays the GEMM start-up cost of DevicePeaks::gemm_overhead_s).
  double fwd_ops = 0, bwd_ops = 0;
  double fwd_gemms = 0, bwd_gemms = 0;
  double flops() const { return fwd_flops + bwd_flops; }
  double bytes() const { return fwd_bytes + bwd_bytes; }
};

// Every module of `model` in forward order (containers before their children) with its own
// costs for an input batch of shape `input` (batch dimension first). The input is data (no
// gradient) unless `input_requires_grad`, as for a layer measured on its own in the middle of a
// network.
std::vector<LayerCost> layer_costs(const nn::Module& model, const Shape& input,
                                   bool input_requires_grad = false);
// FLOPs of one training step's forward and backward passes (without loss and optimizer).
double training_flops(const nn::Module& model, const Shape& input);
// The loss (cross-entropy over `classes`) for model outputs of shape `output`, as a pseudo-layer.
LayerCost loss_cost(const Shape& output, int64_t classes);
// The optimizer step over `params` parameters: FLOPs, bytes and kernel calls per step.
LayerCost optimizer_cost(const std::string& optimizer, double momentum, int64_t params);

// ---------------------------------------------------------------- explain
struct ExplainOptions {
  std::string model = "mlp";  // zoo name or model file
  std::string device = "cpu";
  std::optional<int64_t> batch_size;  // unset: the model's default
  int threads = 0;                    // CPU threads (0: all)
  int warmup = 3;                     // unprofiled steps first (allocator and caches warm)
  int min_steps = 5;                  // profiled steps: at least this many...
  double min_seconds = 1.0;           // ...and at least this long in total
  int max_steps = 50;
  uint64_t seed = 1;
  // A dataset as `freight train --data` takes it: its cost is measured beside the steps (the
  // steps themselves still run on one synthetic batch). "": none.
  std::string data;
};

// What a dataset costs the training loop: reading (and decoding) its training split once per run,
// and the Loader preparing each batch (gathering the shuffled samples, normalising) on its own
// thread, where it overlaps the step; only a batch slower than the step makes the step wait.
struct DataCost {
  std::string data;
  int64_t samples = 0;
  double load_s = 0;               // load_dataset of the training split
  double batch_s = 0;              // one batch prepared (the median of the batches timed)
  int64_t batches_timed = 0;       // at most 20, the first ones of epoch 0
  std::vector<std::string> notes;  // what loading the data said (resizing, held-out split, ...)
};
// Measures `data`'s cost for a model of `spec` at `batch_size`.
DataCost measure_data_cost(const std::string& data, const nn::ModelSpec& spec, int64_t batch_size,
                           uint64_t seed);

// One line of the breakdown. kind: "layer", "loss", "engine" (autograd bookkeeping),
// "optimizer", "copy" (host to device), "sync" (reading the loss back), "other" (unattributed).
struct ExplainRow {
  std::string name, describe, kind;
  double fwd_s = 0, bwd_s = 0;  // per step
  double flops = 0, bytes = 0;  // per step, forward + backward (0 when unknown)
  double working_set = 0;       // bytes of its larger direction: picks the cache level's roof
  double nodes = 0;             // backward nodes per step (measured)
  double ops = 0;               // kernel calls per step (estimated from the node count)
  double time() const { return fwd_s + bwd_s; }
  double intensity() const { return bytes > 0 ? flops / bytes : 0; }
  double rate() const { return time() > 0 ? flops / time() : 0; }  // FLOP/s achieved
};

struct ExplainResult {
  std::string model;
  Device device;
  int64_t batch_size = 0;
  std::string optimizer;
  DevicePeaks peaks;
  std::vector<ExplainRow> rows;  // layers in forward order, then the phases, then "other"
  double step_s = 0;             // profiled step (mean over the kept steps)
  double unprofiled_step_s = 0;  // unprofiled steps interleaved with those, the same faster half
  double attributed = 0;         // fraction of step_s that the rows other than "other" explain
  int steps_measured = 0, steps_kept = 0;
  // Per-phase totals (per step).
  double forward_s = 0, backward_s = 0, engine_s = 0, optimizer_s = 0, copy_s = 0, sync_s = 0;
  double other_s = 0;
  double overhead_est_s = 0;  // kernel calls × the device's per-op cost (included in the rows)
  double contention = 1;      // host_contention() just before profiling: 1 on a quiet host
  // Whether the CPU threads shared a cache just before and just after profiling (not measured
  // on one thread or a GPU).
  CacheSharing cache_sharing_start, cache_sharing_end;
  std::optional<DataCost> data;  // ExplainOptions::data's cost, when one was named
};

// Profiles steps of a zoo model on synthetic data of its input shape (forward, cross-entropy,
// backward, the model's default optimizer). Keeps the faster half of the profiled steps (at
// least one) so that a burst of load from elsewhere does not skew the breakdown.
ExplainResult explain(const ExplainOptions& options);

// Per row: the roofline bound on its rate (FLOP/s) and what bounds it on `peaks`' device:
// "compute", "memory", or "overhead" (its kernel calls cost more than its arithmetic).
double roofline_rate(const ExplainRow& row, const DevicePeaks& peaks);
std::string bound_by(const ExplainRow& row, const DevicePeaks& peaks);

// A row's FLOPs are its layer's direct sums (a multiply-add counted as 2), whatever the kernel
// does: a convolution on Winograd's kernels, which need a quarter of the multiplies, or a
// library faster than the GEMM that measured the peak, can run faster than that peak. The note
// `freight explain` prints under its table when some layer does ("" when none): how many, the
// fastest, and why that is not a measuring error.
std::string beyond_roof_note(const ExplainResult& r);

}  // namespace freight
