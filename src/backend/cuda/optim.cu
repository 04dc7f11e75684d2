// CUDA kernels of the optimizers: one fused multi-tensor launch updates every parameter of a
// step, with PyTorch's update rules in the order of operations of optim_cpu.cpp.
//
// The launch reads a device-side table (multi_tensor.h): per tensor its pointers (parameter,
// gradient, state buffers), size, dtype and one small value (SGD: the buffer is fresh; Adam: the
// index of its step group), then the work items (tensor, chunk of 8192 elements). Grid: one
// block per work item, 256 threads, grid-stride over the items; a block reads its item and its
// tensor's entry (the same for every thread, so the dtype branch is uniform) and its threads
// stride over the chunk. float32 and float64 parameters may share a launch.
//
// Tables are cached per parameter set: the key is every value the table holds, so a hit can
// only return a table with exactly the right contents. In a training loop the parameters and
// state buffers never move, and the gradients come from the caching allocator in the same order
// each step, so after the first steps every call hits: it compares the key, which lives in a
// reused buffer, and launches, with no host allocation and no copy. A miss serialises the table
// into a reused host buffer and copies it to a fresh device buffer on the stream (a pageable
// source is consumed before cudaMemcpyAsync returns); the least recently used of 8 tables is
// dropped, and its device buffer goes back to the caching allocator, where only later work on
// the stream can reuse it.
//
// The learning rate and the step counts are read where the kernels run (StepCounters,
// ops/kernels/optim.h): a first launch adds 1 to the step count of every parameter of the call
// (a thread per table entry), then the update launch reads each parameter's count t and the lr
// and derives the step size lr / (1 − β1ᵗ), √(1 − β2ᵗ) and AdamW's 1 − lr·wd in double as the
// CPU does (the product unfused). Their addresses never change, so a launch captured into a CUDA
// graph replays with the current values, and the same table serves every step. A table entry's
// `aux` is the parameter's slot in the step counts (SGD: shifted left by one, with the fresh
// buffer flag in bit 0).
//
// During a capture the cache is bypassed: the table is written once, outside the graph, and
// read by every replay, so it lives in a graph constant (allocate_graph_constant): a block the
// graph's pool never hands to any other allocation of the capture (a block freed earlier in the
// capture would be rewritten by its old user's kernels at every replay, before the optimizer
// reads it), owned by the graph and freed with it, so a re-capture leaves nothing behind.
#include <cmath>
#include <mutex>
#include <string>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_context.h"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/dispatch.h"
#include "backend/cuda/multi_tensor.h"
#include "ops/kernels/optim.h"

namespace freight::cuda {
namespace {

constexpr size_t kCachedTables = 8;

struct SgdArgs {
  double momentum, keep, wd;  // keep = 1 − dampening
  bool decay, nesterov;
  const double* lr;
};

struct AdamArgs {
  double beta1, beta2, w1, one_b2, eps, wd;  // w1 = 1 − β1, one_b2 = 1 − β2
  bool l2, decoupled, low;
  const double* lr;
  const int64_t* steps;  // each parameter's count after this update, at its slot
};

// ---------------------------------------------------------------- device code
template <class T>
__device__ void sgd_chunk(const MultiTensorEntry& te, int64_t begin, int64_t end,
                          const SgdArgs& a) {
  T* p = static_cast<T*>(te.p);
  const T* g = static_cast<const T*>(te.g);
  T* buf = static_cast<T*>(te.s1);
  const T lr = T(*a.lr);
  const T wd = T(a.wd), mu = T(a.momentum), keep = T(a.keep);
  const bool fresh = (te.aux & 1) != 0;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const T d = a.decay ? g[i] + wd * p[i] : g[i];
    if (!buf) {  // plain SGD: p ← p − lr·(g + wd·p)
      p[i] -= lr * d;
      continue;
    }
    // The first update copies d into the new buffer (no dampening), as PyTorch does.
    const T m = fresh ? d : mu * buf[i] + keep * d;
    buf[i] = m;
    const T step = a.nesterov ? d + mu * m : m;
    p[i] -= lr * step;
  }
}

__global__ void sgd_kernel(const MultiTensorEntry* tensors, const MultiTensorChunk* chunks,
                           int64_t num_chunks, SgdArgs a) {
  for (int64_t c = blockIdx.x; c < num_chunks; c += gridDim.x) {
    const MultiTensorChunk item = chunks[c];
    const MultiTensorEntry te = tensors[item.tensor];
    const int64_t begin = int64_t(item.chunk) * kMultiTensorChunk;
    const int64_t end = min(te.n, begin + kMultiTensorChunk);
    if (te.dtype == 0)
      sgd_chunk<float>(te, begin, end, a);
    else
      sgd_chunk<double>(te, begin, end, a);
  }
}

template <class T>
__device__ void adam_chunk(const MultiTensorEntry& te, int64_t begin, int64_t end,
                           const AdamArgs& a) {
  T* p = static_cast<T*>(te.p);
  const T* g = static_cast<const T*>(te.g);
  T* m = static_cast<T*>(te.s1);
  T* v = static_cast<T*>(te.s2);
  // In double, as the CPU computes them (bias corrections of this update's count t).
  const double lr = *a.lr;
  const double t = double(a.steps[te.aux]);
  const T step_size = T(lr / (1.0 - pow(a.beta1, t)));
  const T bc2_sqrt = T(d_sqrt(1.0 - pow(a.beta2, t)));
  const T shrink = T(1.0 - __dmul_rn(lr, a.wd));  // __dmul_rn: never fused into an FMA
  const T b2 = T(a.beta2), w1 = T(a.w1), one_b2 = T(a.one_b2);
  const T eps = T(a.eps), wd = T(a.wd);
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    // m = lerp(m, g, 1 − β1) from the nearer end; v = β2·v + (1 − β2)·g·g;
    // p = p − (lr / bc1)·(m / (√v / √bc2 + ε)).
    const T pi = a.decoupled ? p[i] * shrink : p[i];
    const T gi = a.l2 ? g[i] + wd * pi : g[i];
    const T mi = a.low ? m[i] + w1 * (gi - m[i]) : gi - (gi - m[i]) * (T(1) - w1);
    const T vi = b2 * v[i] + one_b2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const T denom = d_sqrt(vi) / bc2_sqrt + eps;
    p[i] = pi - step_size * (mi / denom);
  }
}

__global__ void adam_kernel(const MultiTensorEntry* tensors, const MultiTensorChunk* chunks,
                            int64_t num_chunks, AdamArgs a) {
  for (int64_t c = blockIdx.x; c < num_chunks; c += gridDim.x) {
    const MultiTensorChunk item = chunks[c];
    const MultiTensorEntry te = tensors[item.tensor];
    const int64_t begin = int64_t(item.chunk) * kMultiTensorChunk;
    const int64_t end = min(te.n, begin + kMultiTensorChunk);
    if (te.dtype == 0)
      adam_chunk<float>(te, begin, end, a);
    else
      adam_chunk<double>(te, begin, end, a);
  }
}

// One thread per table entry: the step count at the entry's slot (`aux`, shifted right by
// `slot_shift`) goes up by one. Slots are distinct, so no two threads touch one count.
__global__ void advance_steps_kernel(const MultiTensorEntry* tensors, int64_t count, int slot_shift,
                                     int64_t* steps) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count;
       i += int64_t(gridDim.x) * blockDim.x)
    steps[tensors[i].aux >> slot_shift] += 1;
}

// ---------------------------------------------------------------- table cache
enum TableKind : uint64_t { kSgdTable = 1, kAdamTable = 2 };

struct CachedTable {
  std::vector<uint64_t> key;
  Tensor table;  // device bytes
  MultiTensorLayout layout;
  uint64_t last_use = 0;
};

// What a launch reads: the table's device bytes and their layout.
struct DeviceTable {
  const unsigned char* base = nullptr;
  MultiTensorLayout layout;
};

struct TableCache {
  std::mutex mu;
  std::vector<CachedTable> tables;
  uint64_t clock = 0;
  // Scratch reused from call to call (its capacity stays), so a hit allocates nothing.
  std::vector<uint64_t> key;
  std::vector<MultiTensorEntry> entries;
  std::vector<unsigned char> bytes;
};

TableCache& table_cache() {
  static TableCache* cache = new TableCache();  // lives as long as the process
  return *cache;
}

uint64_t bits(const void* p) {
  return uint64_t(reinterpret_cast<uintptr_t>(p));
}

bool capturing(int dev) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  FREIGHT_CUDA_CHECK(cudaStreamIsCapturing(stream(dev), &st));
  return st != cudaStreamCaptureStatusNone;
}

// Copies a table to the device outside any capture: on the copy stream, waited for, in relaxed
// capture mode (this thread is capturing the compute stream, and a host copy cannot be part of
// a graph). The contents never change afterwards, so every replay reads what was copied.
void upload_outside_capture(void* dst, const std::vector<unsigned char>& bytes, int dev) {
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  FREIGHT_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
  cudaError_t err =
      cudaMemcpyAsync(dst, bytes.data(), bytes.size(), cudaMemcpyHostToDevice, copy_stream(dev));
  if (err == cudaSuccess) err = cudaStreamSynchronize(copy_stream(dev));
  FREIGHT_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
  FREIGHT_CUDA_CHECK(err);
}

// The device table holding tc.entries (call with tc.mu held). Outside a capture it comes from
// the cache (valid until the next call); inside one it is a constant of the graph.
DeviceTable device_table(TableCache& tc, TableKind kind, int dev) {
  if (capturing(dev)) {
    DeviceTable t;
    t.layout = build_multi_tensor_table(tc.entries, tc.bytes);
    if (tc.bytes.empty()) return t;
    void* constant = allocate_graph_constant(dev, tc.bytes.size());
    upload_outside_capture(constant, tc.bytes, dev);
    t.base = static_cast<const unsigned char*>(constant);
    return t;
  }
  tc.key.clear();
  tc.key.push_back(kind);
  tc.key.push_back(uint64_t(dev));
  tc.key.push_back(tc.entries.size());
  for (const MultiTensorEntry& e : tc.entries) {
    tc.key.push_back(bits(e.p));
    tc.key.push_back(bits(e.g));
    tc.key.push_back(bits(e.s1));
    tc.key.push_back(bits(e.s2));
    tc.key.push_back(uint64_t(e.n));
    tc.key.push_back((uint64_t(uint32_t(e.dtype)) << 32) | uint32_t(e.aux));
  }
  ++tc.clock;
  auto view = [](const CachedTable& t) {
    return DeviceTable{static_cast<const unsigned char*>(t.table.data_ptr()), t.layout};
  };
  for (CachedTable& t : tc.tables)
    if (t.key == tc.key) {
      t.last_use = tc.clock;
      return view(t);
    }
  CachedTable fresh;
  fresh.key = tc.key;
  fresh.last_use = tc.clock;
  fresh.layout = build_multi_tensor_table(tc.entries, tc.bytes);
  fresh.table = Tensor::empty({int64_t(tc.bytes.size())}, DType::U8, Device::cuda(dev));
  if (!tc.bytes.empty())
    FREIGHT_CUDA_CHECK(cudaMemcpyAsync(fresh.table.data_ptr(), tc.bytes.data(), tc.bytes.size(),
                                       cudaMemcpyHostToDevice, stream(dev)));
  // Keep at most kCachedTables: the least recently used one makes room.
  if (tc.tables.size() < kCachedTables) {
    tc.tables.push_back(std::move(fresh));
    return view(tc.tables.back());
  }
  CachedTable* oldest = &tc.tables[0];
  for (CachedTable& t : tc.tables)
    if (t.last_use < oldest->last_use) oldest = &t;
  *oldest = std::move(fresh);
  return view(*oldest);
}

int32_t dtype_code(const Tensor& t, const char* kernel) {
  if (t.dtype() == DType::F32) return 0;
  if (t.dtype() == DType::F64) return 1;
  unsupported_dtype(kernel, t.dtype(), "float32 and float64");
}

// Checks that `other` matches parameter k (contiguous, same size, dtype and device).
void check_match(const Tensor& p, const Tensor& other, size_t k, const char* what,
                 const char* kernel) {
  FREIGHT_CHECK(other.defined() && other.is_contiguous() && other.numel() == p.numel() &&
                    other.dtype() == p.dtype() && other.device() == p.device(),
                std::string(kernel) + " (cuda): the " + what + " of parameter " +
                    std::to_string(k) + " must be contiguous and match it in size, dtype and " +
                    "device");
}

MultiTensorEntry entry_for(const Tensor& p, const Tensor& g, const Tensor* s1, const Tensor* s2,
                           int32_t aux, size_t k, int dev, const char* kernel) {
  FREIGHT_CHECK(p.is_contiguous() && p.device() == Device::cuda(dev),
                std::string(kernel) + " (cuda): parameter " + std::to_string(k) +
                    " must be contiguous and on the device of parameter 0");
  check_match(p, g, k, "gradient", kernel);
  if (s1) check_match(p, *s1, k, "first state buffer", kernel);
  if (s2) check_match(p, *s2, k, "second state buffer", kernel);
  return {p.data_ptr(),
          g.data_ptr(),
          s1 ? s1->data_ptr() : nullptr,
          s2 ? s2->data_ptr() : nullptr,
          p.numel(),
          dtype_code(p, kernel),
          aux};
}

struct CounterPointers {
  const double* lr;
  int64_t* steps;
};

// The device addresses of the counters (ops/kernels/optim.h), checked.
CounterPointers counter_pointers(const StepCounters& c, size_t params, int dev,
                                 const char* kernel) {
  FREIGHT_CHECK(c.lr.defined() && c.lr.dtype() == DType::F64 && c.lr.numel() == 1 &&
                    c.lr.device() == Device::cuda(dev) && c.step_counts.defined() &&
                    c.step_counts.dtype() == DType::I64 && c.step_counts.is_contiguous() &&
                    c.step_counts.device() == Device::cuda(dev) && c.slot.size() == params,
                std::string(kernel) +
                    " (cuda): the counters must be a float64 lr [1] and contiguous int64 step "
                    "counts on the parameters' device, and one slot per parameter");
  for (int32_t s : c.slot)
    FREIGHT_CHECK(s >= 0 && s < c.step_counts.numel(),
                  std::string(kernel) + " (cuda): step-count slot out of range");
  return {static_cast<const double*>(c.lr.data_ptr()),
          static_cast<int64_t*>(c.step_counts.data_ptr())};
}

// Queues the launch that advances the step counts of the table's parameters.
void advance_steps(const DeviceTable& t, size_t entries, int slot_shift, int64_t* steps, int dev) {
  advance_steps_kernel<<<blocks_for(int64_t(entries)), 256, 0, stream(dev)>>>(
      reinterpret_cast<const MultiTensorEntry*>(t.base), int64_t(entries), slot_shift, steps);
  FREIGHT_CUDA_CHECK_LAUNCH();
}

// ---------------------------------------------------------------- slots
void sgd_step_cuda(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                   const std::vector<Tensor>& momentum, const std::vector<uint8_t>& fresh,
                   const StepCounters& counters, const SgdConfig& cfg) {
  const bool with_buffers = !momentum.empty();
  FREIGHT_CHECK(
      grads.size() == params.size() &&
          (!with_buffers || (momentum.size() == params.size() && fresh.size() == params.size())),
      "sgd_step (cuda): the parameter, gradient, buffer and fresh lists differ in length");
  if (params.empty()) return;
  const int dev = params[0].device().index;
  set_device(dev);
  const CounterPointers c = counter_pointers(counters, params.size(), dev, "sgd_step");
  TableCache& tc = table_cache();
  std::lock_guard<std::mutex> lock(tc.mu);  // held until the launches are queued
  tc.entries.clear();
  for (size_t k = 0; k < params.size(); ++k) {
    const int32_t aux = (counters.slot[k] << 1) | (with_buffers && fresh[k] ? 1 : 0);
    tc.entries.push_back(entry_for(params[k], grads[k], with_buffers ? &momentum[k] : nullptr,
                                   nullptr, aux, k, dev, "sgd_step"));
  }
  const DeviceTable t = device_table(tc, kSgdTable, dev);
  advance_steps(t, tc.entries.size(), 1, c.steps, dev);
  if (t.layout.chunks == 0) return;
  SgdArgs a{};
  a.momentum = cfg.momentum;
  a.keep = 1 - cfg.dampening;
  a.wd = cfg.weight_decay;
  a.decay = cfg.weight_decay != 0;
  a.nesterov = cfg.nesterov;
  a.lr = c.lr;
  const unsigned char* base = t.base;
  sgd_kernel<<<blocks_for_rows(t.layout.chunks), 256, 0, stream(dev)>>>(
      reinterpret_cast<const MultiTensorEntry*>(base),
      reinterpret_cast<const MultiTensorChunk*>(base + t.layout.chunks_offset()), t.layout.chunks,
      a);
  FREIGHT_CUDA_CHECK_LAUNCH();
}

void adam_step_cuda(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                    const std::vector<Tensor>& exp_avg, const std::vector<Tensor>& exp_avg_sq,
                    const StepCounters& counters, const AdamConfig& cfg) {
  const size_t count = params.size();
  FREIGHT_CHECK(grads.size() == count && exp_avg.size() == count && exp_avg_sq.size() == count,
                "adam_step (cuda): the parameter, gradient and state lists differ in length");
  if (count == 0) return;
  const int dev = params[0].device().index;
  set_device(dev);
  const CounterPointers c = counter_pointers(counters, count, dev, "adam_step");
  AdamArgs a{};
  a.beta1 = cfg.beta1;
  a.beta2 = cfg.beta2;
  a.w1 = 1 - cfg.beta1;
  a.one_b2 = 1 - cfg.beta2;
  a.eps = cfg.eps;
  a.wd = cfg.weight_decay;
  a.l2 = !cfg.decoupled && cfg.weight_decay != 0;
  a.decoupled = cfg.decoupled && cfg.weight_decay != 0;
  a.low = cfg.beta1 > 0.5;  // lerp from the nearer end, as PyTorch
  a.lr = c.lr;
  a.steps = c.steps;
  TableCache& tc = table_cache();
  std::lock_guard<std::mutex> lock(tc.mu);  // held until the launches are queued
  tc.entries.clear();
  for (size_t k = 0; k < count; ++k)
    tc.entries.push_back(entry_for(params[k], grads[k], &exp_avg[k], &exp_avg_sq[k],
                                   counters.slot[k], k, dev, "adam_step"));
  const DeviceTable t = device_table(tc, kAdamTable, dev);
  advance_steps(t, tc.entries.size(), 0, c.steps, dev);
  if (t.layout.chunks == 0) return;
  const unsigned char* base = t.base;
  adam_kernel<<<blocks_for_rows(t.layout.chunks), 256, 0, stream(dev)>>>(
      reinterpret_cast<const MultiTensorEntry*>(base),
      reinterpret_cast<const MultiTensorChunk*>(base + t.layout.chunks_offset()), t.layout.chunks,
      a);
  FREIGHT_CUDA_CHECK_LAUNCH();
}

}  // namespace

FREIGHT_REGISTER_KERNEL(kernels::sgd_step, CUDA, sgd_step_cuda);
FREIGHT_REGISTER_KERNEL(kernels::adam_step, CUDA, adam_step_cuda);

}  // namespace freight::cuda
