// Predicted training time and memory of a model on each device, from its FLOPs and bytes per
// layer (freight/explain.h's costs) and the devices' measured peaks (freight/peaks.h): the
// library behind `freight plan`.
//
// The time model, per layer and direction (forward, backward), is a roofline plus overheads:
//   t = max(FLOPs / fp32 peak + GEMMs × GEMM start-up, bytes / memory bandwidth)
//       + kernel calls × (tape op cost / 2)
// where the GEMM start-up, the tape op cost (one tiny op forward plus its backward node) and the
// peaks are all measured by `freight devices --measure`; nothing is fitted to training runs. A
// step adds the optimizer, the loss, the batch's transfer to the device and the training loop's
// own per-step work (loss read-back, accuracy count).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "freight/explain.h"
#include "freight/peaks.h"

namespace freight {

struct PlanOptions {
  std::string model = "mlp";  // zoo name or model file
  int64_t samples = 60000;    // training samples per epoch
  int64_t epochs = 1;
  std::optional<int64_t> batch_size;  // unset: the model's default
  std::string optimizer;              // "": the model's default
  // Add a reference GPU with datasheet figures (not measured) when no GPU is present, so the
  // plan can say what a GPU would change.
  bool reference_gpu = true;
};

struct DevicePlan {
  std::string label;  // "cpu", "cuda:0", "2 x cuda" (data parallel), "H100 (datasheet)"
  DevicePeaks peaks;
  bool measured = true;  // false for the datasheet reference
  int gpus = 1;          // > 1: a data-parallel projection over that many GPUs
  // Per step, the terms of the model summed over layers (each layer contributes its larger
  // roofline term to compute or memory), plus overheads and the batch transfer.
  double compute_s = 0, memory_s = 0, overhead_s = 0, transfer_s = 0, sync_s = 0;
  double step_s = 0, epoch_s = 0, total_s = 0;
  std::string dominant;  // "compute", "memory", "overhead" or "transfer"
  // Memory, bytes.
  double params_bytes = 0, grads_bytes = 0, optimizer_bytes = 0, activation_bytes = 0;
  double total_bytes = 0, available_bytes = 0;
  bool fits = true;
};

struct PlanResult {
  std::string model;
  int64_t samples = 0, epochs = 0, batch_size = 0, steps_per_epoch = 0;
  std::string optimizer;           // "sgd", "adam", ...
  std::string optimizer_describe;  // "SGD with momentum"
  int64_t params = 0;
  double flops_per_step = 0, bytes_per_step = 0, ops_per_step = 0;
  std::vector<DevicePlan> devices;
  double contention = 1;       // host_contention() when planned: > 1 when the host is busy now
  std::string recommendation;  // "cpu", "gpu" or "gpus"
  std::string reason;          // in plain words
};

// Plans the model on every device present (the CPU, each GPU, and a data-parallel projection
// when there are several GPUs), with peaks from peaks_for().
PlanResult plan(const PlanOptions& options);

// The prediction on one device with the given peaks (exposed so tests can plan against peaks
// of their own).
DevicePlan plan_device(const PlanResult& shape, const std::vector<LayerCost>& layers,
                       const LayerCost& loss, const LayerCost& optimizer, double batch_bytes,
                       const DevicePeaks& peaks, int gpus = 1);

// The roofline time of one direction of a layer on `peaks`' device: the larger of
// FLOPs / fp32 peak + GEMMs × GEMM start-up and bytes / the bandwidth of the level they fit in.
double roofline_seconds(double flops, double bytes, double gemms, const DevicePeaks& peaks);

// Datasheet figures of an NVIDIA H100 SXM (67 TFLOP/s FP32, 3.35 TB/s, ...), with host-side
// per-op costs taken from `cpu` (the framework's own work per op runs on the host either way).
DevicePeaks reference_h100(const DevicePeaks& cpu);

}  // namespace freight
