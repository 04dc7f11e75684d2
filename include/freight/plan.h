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
  // Data parallelism. `ranks` > 1: the CPU trained by that many ranks on this host, its gradient
  // sums timed on the link measured by `freight devices --measure --nproc N` (an error when none
  // was). `nodes` x `gpus_per_node` > 1: a scaling table from 1 GPU up to that many (the GPU
  // present, else the datasheet H100), the sums on datasheet links (NVLink within a node,
  // InfiniBand NDR between nodes).
  int ranks = 1;
  int nodes = 0, gpus_per_node = 0;
};

// The link the ranks of a data-parallel job sum their gradients over, as a time model of an
// in-place all-reduce of `bytes` over p ranks. Measured: the times of `freight devices --measure
// --nproc N` at their sizes (interpolated on a log scale), exact for p = ranks; at another p, or
// for a datasheet link, the ring: 2(p - 1) latency_s + 2(p - 1)/p x bytes / bus_bandwidth.
struct LinkPeaks {
  std::string kind;  // "mpi, 1 host", "NVLink (datasheet)", "InfiniBand NDR (datasheet)"
  bool measured = false;
  std::string measured_at;
  int ranks = 0;                                 // measured with
  std::vector<std::pair<double, double>> times;  // (bytes, seconds), ascending bytes
  double latency_s = 0;                          // per ring step
  double bus_bandwidth = 0;                      // bytes/s through each rank's link
  double all_reduce_seconds(double bytes, int p) const;
};
// The link of `size` ranks on `hosts` hosts from measured (bytes, seconds) pairs.
LinkPeaks link_from_measurement(const std::vector<std::pair<double, double>>& times, int size,
                                int hosts);
// The peaks cache (peaks_cache_path()) keeps the last measured link per kind.
void save_link(const LinkPeaks& link, const std::string& path);
bool load_link(const std::string& kind, const std::string& path, LinkPeaks& out);
LinkPeaks nvlink_h100();     // intra-node, datasheet
LinkPeaks infiniband_ndr();  // inter-node, datasheet, per GPU

// One row of the GPU scaling table (PlanOptions::nodes).
struct ScalePoint {
  int gpus = 1, nodes = 1;
  double compute_s = 0;       // a rank's step without the sums
  double comm_s = 0;          // the all-reduce of the gradient
  double exposed_comm_s = 0;  // what backward does not hide
  double step_s = 0, epoch_s = 0;
  double speedup = 1, efficiency = 1;
};

struct DevicePlan {
  std::string label;  // "cpu", "cuda:0", "2 x cuda" (data parallel), "H100 (datasheet)"
  DevicePeaks peaks;
  bool measured = true;  // false for the datasheet reference
  int gpus = 1;          // > 1: a data-parallel projection over that many GPUs
  int ranks = 1;         // > 1: the CPU data-parallel over that many ranks of this host
  double comm_s = 0;     // data parallel: the all-reduce of the gradient per step
  // Per step, the terms of the model summed over layers (each layer contributes its larger
  // roofline term to compute or memory), plus overheads and the batch transfer.
  double compute_s = 0, memory_s = 0, overhead_s = 0, transfer_s = 0, sync_s = 0;
  double step_s = 0, epoch_s = 0, total_s = 0;
  std::string dominant;  // "compute", "memory", "overhead" or "transfer"
  // Memory, bytes. activation_bytes: what the forward keeps for the backward, and the largest
  // layer's gradients in flight with its kernels' workspace on this device (a convolution's
  // unrolled chunks or oneDNN's blocked copies: nn::Module::workspace_bytes).
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
  double contention = 1;  // host_contention() when planned: > 1 when the host is busy now
  // PlanOptions::nodes: p = 1, 2, 4, ... up to nodes x gpus_per_node, on `scaling_device`.
  std::vector<ScalePoint> scaling;
  std::string scaling_device;
  std::string scaling_links;    // which links the sums were modelled on
  int comm_dominates_from = 0;  // the first p whose exposed sums outlast its compute (0: none)
  std::string recommendation;   // "cpu", "gpu" or "gpus"
  std::string reason;           // in plain words
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
