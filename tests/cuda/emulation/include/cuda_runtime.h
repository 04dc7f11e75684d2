// Emulated CUDA runtime API (the calls Freight makes), for the CPU emulation in ../README.md.
// Device memory is host memory, streams are queues that run later and in random interleavings
// (or record their operations while they are captured into a graph: emu_streams.h), one device
// unless EMU_NO_GPU is set. Stream capture follows CUDA's rules where Freight depends on them: an
// unsafe call (cudaMalloc, cudaFree, a stream synchronisation) from the capturing thread
// invalidates the capture unless the thread switched to relaxed mode, a copy between host and
// device memory cannot be captured, and cudaStreamEndCapture then fails.
#pragma once
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "emu_core.h"

enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInsufficientDriver = 35,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorInvalidDevice = 101,
  cudaErrorNotReady = 600,
  cudaErrorStreamCaptureUnsupported = 900,
  cudaErrorStreamCaptureInvalidated = 901,
  cudaErrorStreamCaptureIsolation = 906,
};
enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4
};
enum cudaStreamCaptureMode {
  cudaStreamCaptureModeGlobal = 0,
  cudaStreamCaptureModeThreadLocal = 1,
  cudaStreamCaptureModeRelaxed = 2
};
enum cudaStreamCaptureStatus {
  cudaStreamCaptureStatusNone = 0,
  cudaStreamCaptureStatusActive = 1,
  cudaStreamCaptureStatusInvalidated = 2
};
enum cudaDeviceAttr { cudaDevAttrClockRate = 13, cudaDevAttrMemoryClockRate = 36 };
enum cudaDataType_t { CUDA_R_32F = 0, CUDA_R_64F = 1, CUDA_R_16BF = 14 };

using cudaStream_t = struct CUstream_st*;
using cudaEvent_t = struct CUevent_st*;
constexpr unsigned cudaStreamNonBlocking = 1;
constexpr unsigned cudaEventDisableTiming = 2;
constexpr unsigned cudaHostAllocDefault = 0;
constexpr unsigned cudaHostAllocPortable = 1;
constexpr unsigned cudaHostAllocMapped = 2;

struct cudaDeviceProp {
  char name[256];
  size_t totalGlobalMem;
  int major, minor;
  int multiProcessorCount;
  int memoryBusWidth;
  int l2CacheSize;
  int ECCEnabled;
  int pciBusID, pciDeviceID, pciDomainID;
};

namespace emu {
// EMU_NO_GPU: none; else EMU_DEVICES of them (1 by default). The emulated devices share the host's
// memory; what tells them apart is the current device each thread sets (cudaSetDevice), which
// NCCL's emulation reads to refuse two ranks on one GPU.
inline int g_device_count() {
  if (std::getenv("EMU_NO_GPU")) return 0;
  const char* e = std::getenv("EMU_DEVICES");
  int n = e && *e ? std::atoi(e) : 1;
  return n > 0 ? n : 1;
}
inline thread_local int g_current_device = 0;
inline bool valid_device(int d) {
  return d >= 0 && d < g_device_count();
}
// Device allocations (start, size), to tell device from host memory.
inline std::mutex g_mem_mu;
inline std::map<const char*, size_t> g_device_blocks;
// Page-locked host allocations (cudaHostAlloc): copies from and to them are asynchronous.
inline std::map<const char*, size_t> g_pinned_blocks;
// The block of `blocks` that holds address p, if any (call with g_mem_mu held).
inline bool block_of(const std::map<const char*, size_t>& blocks, const void* p, Range* out) {
  auto c = static_cast<const char*>(p);
  auto it = blocks.upper_bound(c);
  if (it == blocks.begin()) return false;
  --it;
  if (c >= it->first + (it->second ? it->second : 1)) return false;
  *out = Range{const_cast<char*>(it->first), it->second};
  return true;
}
inline bool in_blocks(const std::map<const char*, size_t>& blocks, const void* p) {
  std::lock_guard<std::mutex> lock(g_mem_mu);
  Range r;
  return block_of(blocks, p, &r);
}
inline bool is_device(const void* p) {
  return in_blocks(g_device_blocks, p);
}
inline bool is_pinned(const void* p) {
  return in_blocks(g_pinned_blocks, p);
}
inline double now_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
inline uint64_t g_captures_begun = 0;
}  // namespace emu
#include "emu_graphs.h"
namespace emu {
// Frees block p of `blocks` (cudaFree, cudaFreeHost) once all queued work has run, as CUDA does.
inline cudaError_t free_block(std::map<const char*, size_t>& blocks, void* p, const char* what) {
  if (!p) return cudaSuccess;
  drain_all(what);
  size_t n = 0;
  {
    std::lock_guard<std::mutex> lock(g_mem_mu);
    auto it = blocks.find(static_cast<const char*>(p));
    if (it == blocks.end()) return cudaErrorInvalidValue;
    n = it->second;
    blocks.erase(it);
  }
  cancel_poison(p, n ? n : 1);
  forget_capture_block(p);
  std::free(p);
  return cudaSuccess;
}
}  // namespace emu
using cudaGraph_t = emu::Graph*;
using cudaGraphExec_t = emu::Graph*;

inline cudaError_t cudaGetLastError() {
  auto e = cudaError_t(emu::g_last_error);
  emu::g_last_error = 0;
  return e;
}
inline const char* cudaGetErrorString(cudaError_t e) {
  return e == 0 ? "no error" : "emulated error";
}
inline const char* cudaGetErrorName(cudaError_t e) {
  static thread_local std::string name;
  name = e == 0 ? "cudaSuccess" : "cudaErrorEmu" + std::to_string(int(e));
  return name.c_str();
}
inline cudaError_t cudaGetDeviceCount(int* n) {
  *n = emu::g_device_count();
  return *n ? cudaSuccess : cudaErrorNoDevice;
}
inline cudaError_t cudaSetDevice(int d) {
  if (!emu::valid_device(d)) return cudaErrorInvalidDevice;
  emu::g_current_device = d;
  return cudaSuccess;
}
inline cudaError_t cudaGetDevice(int* d) {
  *d = emu::g_current_device;
  return cudaSuccess;
}
inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int d) {
  if (!emu::valid_device(d)) return cudaErrorInvalidDevice;
  *p = cudaDeviceProp{};
  std::strcpy(p->name, "Emulated GPU (CPU emulation of the CUDA runtime)");
  p->totalGlobalMem = size_t(80) << 30;
  p->major = 9;
  p->minor = 0;
  p->multiProcessorCount = 132;
  p->memoryBusWidth = 5120;
  p->l2CacheSize = 50 << 20;
  p->ECCEnabled = 1;
  return cudaSuccess;
}
inline cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr a, int d) {
  if (!emu::valid_device(d)) return cudaErrorInvalidDevice;
  *v = a == cudaDevAttrClockRate ? 1980000 : 2619000;
  return cudaSuccess;
}
inline cudaError_t cudaDriverGetVersion(int* v) {
  *v = 13000;
  return cudaSuccess;
}
inline cudaError_t cudaRuntimeGetVersion(int* v) {
  *v = 13000;
  return cudaSuccess;
}

// ---------------------------------------------------------------- streams and events
inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags) {
  *s = reinterpret_cast<cudaStream_t>(new int(0));  // distinct handles: queues are per stream
  std::lock_guard<std::recursive_mutex> lock(emu::g_exec_mu);
  emu::g_queues[*s].blocking = (flags & cudaStreamNonBlocking) == 0;
  return cudaSuccess;
}
inline cudaError_t cudaStreamDestroy(cudaStream_t s) {
  // CUDA lets queued work finish after the call; here it finishes before.
  std::lock_guard<std::recursive_mutex> lock(emu::g_exec_mu);
  emu::drain_stream(s, "cudaStreamDestroy");
  emu::g_queues.erase(s);
  delete reinterpret_cast<int*>(s);
  return cudaSuccess;
}
inline cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  if (emu::capturing(s) || emu::unsafe_call_refused()) {
    std::lock_guard<std::mutex> lock(emu::g_capture_mu);
    auto it = emu::g_captures.find(s);
    if (it != emu::g_captures.end()) it->second.invalidated = true;
    return cudaErrorStreamCaptureUnsupported;
  }
  emu::drain_stream(s, "cudaStreamSynchronize");
  return cudaSuccess;
}
inline cudaError_t cudaDeviceSynchronize() {
  if (emu::unsafe_call_refused()) return cudaErrorStreamCaptureUnsupported;
  emu::drain_all("cudaDeviceSynchronize");
  return cudaSuccess;
}
// An event completes when its stream reaches its latest record; it then holds the host time at
// that moment, so cudaEventElapsedTime measures host time (enough for peaks.cu to run,
// meaningless as a peak).
inline emu::EventState& event_state(cudaEvent_t e) {
  return *reinterpret_cast<emu::EventHandle*>(e)->state;
}
inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) {
  *e = reinterpret_cast<cudaEvent_t>(new emu::EventHandle());
  return cudaSuccess;
}
inline cudaError_t cudaEventCreate(cudaEvent_t* e) {
  return cudaEventCreateWithFlags(e, 0);
}
inline cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete reinterpret_cast<emu::EventHandle*>(e);  // queued records keep its state alive
  return cudaSuccess;
}
inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = nullptr) {
  std::shared_ptr<emu::EventState> st = reinterpret_cast<emu::EventHandle*>(e)->state;
  uint64_t gen;
  {
    std::lock_guard<std::recursive_mutex> lock(emu::g_exec_mu);
    gen = ++st->recorded;
  }
  emu::enqueue(s, [st, gen] {
    if (st->completed < gen) st->completed = gen;
    st->ms = emu::now_ms();
  });
  return cudaSuccess;
}
inline bool event_complete(cudaEvent_t e) {
  std::lock_guard<std::recursive_mutex> lock(emu::g_exec_mu);
  const emu::EventState& st = event_state(e);
  return st.completed >= st.recorded;
}
inline cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  emu::run_until([e] { return event_complete(e); }, "cudaEventSynchronize");
  return cudaSuccess;
}
inline cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t stop) {
  if (!event_complete(start) || !event_complete(stop)) return cudaErrorNotReady;
  *ms = float(event_state(stop).ms - event_state(start).ms);
  return cudaSuccess;
}
inline cudaError_t cudaEventQuery(cudaEvent_t e) {
  if (!event_complete(e)) emu::background_progress();  // the device moves while the host polls
  return event_complete(e) ? cudaSuccess : cudaErrorNotReady;
}
// Holds `s` until the event's latest record so far has run (a never-recorded event: no wait).
// Freight never makes a captured stream wait for outside work (that would be a cross-stream
// dependency inside the graph); the emulation refuses it as CUDA refuses an event recorded
// outside the capture.
inline cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned) {
  if (emu::capturing(s)) {
    std::lock_guard<std::mutex> lock(emu::g_capture_mu);
    emu::g_captures[s].invalidated = true;
    return cudaErrorStreamCaptureIsolation;
  }
  std::shared_ptr<emu::EventState> st = reinterpret_cast<emu::EventHandle*>(e)->state;
  std::lock_guard<std::recursive_mutex> lock(emu::g_exec_mu);
  if (st->recorded > 0) emu::push(s, emu::QueuedOp{nullptr, st, st->recorded, 0});
  return cudaSuccess;
}

// ---------------------------------------------------------------- memory
inline cudaError_t cudaMalloc(void** p, size_t n) {
  if (emu::unsafe_call_refused()) return cudaErrorStreamCaptureUnsupported;
  if (n > (size_t(64) << 30)) return cudaErrorMemoryAllocation;
  *p = std::malloc(n ? n : 1);  // exact size: AddressSanitizer sees overruns
  if (!*p) return cudaErrorMemoryAllocation;
  std::memset(*p, 0xA5, n);  // garbage, as fresh device memory is
  {
    std::lock_guard<std::mutex> lock(emu::g_mem_mu);
    emu::g_device_blocks[static_cast<const char*>(*p)] = n;
  }
  emu::note_capture_block(*p, n);  // a graph's own memory, when a capture of this thread runs
  return cudaSuccess;
}
template <class T>
inline cudaError_t cudaMalloc(T** p, size_t n) {
  return cudaMalloc(reinterpret_cast<void**>(p), n);
}
inline cudaError_t cudaFree(void* p) {
  if (emu::unsafe_call_refused()) return cudaErrorStreamCaptureUnsupported;
  return emu::free_block(emu::g_device_blocks, p, "cudaFree");
}
inline cudaError_t cudaHostAlloc(void** p, size_t n, unsigned) {
  *p = std::malloc(n ? n : 1);
  if (!*p) return cudaErrorMemoryAllocation;
  std::lock_guard<std::mutex> lock(emu::g_mem_mu);
  emu::g_pinned_blocks[static_cast<const char*>(*p)] = n;
  return cudaSuccess;
}
inline cudaError_t cudaFreeHost(void* p) {
  return emu::free_block(emu::g_pinned_blocks, p, "cudaFreeHost");
}
inline cudaError_t cudaHostGetDevicePointer(void** d, void* h, unsigned flags) {
  if (flags != 0) return cudaErrorInvalidValue;
  *d = h;
  return cudaSuccess;
}
inline cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind,
                                   cudaStream_t stream) {
  if (emu::capturing(stream) && n && (!emu::is_device(d) || !emu::is_device(s))) {
    std::lock_guard<std::mutex> lock(emu::g_capture_mu);
    emu::g_captures[stream].invalidated = true;
    return cudaErrorStreamCaptureUnsupported;  // a host copy cannot be part of a graph
  }
  if (!n) return cudaSuccess;
  if (emu::capturing(stream)) {
    emu::enqueue(
        stream, [d, s, n] { std::memcpy(d, s, n); }, "cudaMemcpyAsync");
    return cudaSuccess;
  }
  std::string what = "cudaMemcpyAsync on stream " + emu::stream_name(stream);
  bool from_pageable = !emu::is_device(s) && !emu::is_pinned(s);
  bool to_pageable = !emu::is_device(d) && !emu::is_pinned(d);
  if (from_pageable) {
    // CUDA stages pageable source memory before the call returns: the caller may reuse it.
    auto staged = std::make_shared<std::vector<char>>(static_cast<const char*>(s),
                                                      static_cast<const char*>(s) + n);
    emu::enqueue(stream, [d, staged, n, what] {
      std::memcpy(d, staged->data(), n);
      emu::note_write(d, n, what);
    });
  } else {
    emu::enqueue(stream, [d, s, n, what] {
      std::memcpy(d, s, n);
      emu::note_write(d, n, what);
    });
  }
  // Into pageable memory the call returns once the copy has run.
  if (to_pageable) emu::drain_stream(stream, "cudaMemcpyAsync into pageable memory");
  return cudaSuccess;
}
// On the legacy default stream, asynchronous to the host (device memory).
inline cudaError_t cudaMemset(void* d, int v, size_t n) {
  if (emu::unsafe_call_refused()) return cudaErrorStreamCaptureUnsupported;
  if (n)
    emu::enqueue(nullptr, [d, v, n] {
      std::memset(d, v, n);
      emu::note_write(d, n, "cudaMemset on the legacy stream");
    });
  return cudaSuccess;
}
inline cudaError_t cudaMemsetAsync(void* d, int v, size_t n, cudaStream_t stream = nullptr) {
  std::string what = "cudaMemsetAsync on stream " + emu::stream_name(stream);
  if (n)
    emu::enqueue(
        stream,
        [d, v, n, what] {
          std::memset(d, v, n);
          emu::note_write(d, n, what);
        },
        "cudaMemsetAsync");
  return cudaSuccess;
}
inline cudaError_t cudaMemGetInfo(size_t* f, size_t* t) {
  *f = size_t(79) << 30;
  *t = size_t(80) << 30;
  return cudaSuccess;
}

// ---------------------------------------------------------------- graphs
inline cudaError_t cudaStreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus* st) {
  std::lock_guard<std::mutex> lock(emu::g_capture_mu);
  auto it = emu::g_captures.find(s);
  *st = it == emu::g_captures.end() ? cudaStreamCaptureStatusNone
        : it->second.invalidated    ? cudaStreamCaptureStatusInvalidated
                                    : cudaStreamCaptureStatusActive;
  return cudaSuccess;
}
inline cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode) {
  int previous = emu::t_capture_mode;
  emu::t_capture_mode = *mode;
  *mode = cudaStreamCaptureMode(previous);
  return cudaSuccess;
}
inline cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode) {
  std::lock_guard<std::mutex> lock(emu::g_capture_mu);
  if (!s || emu::g_captures.count(s)) return cudaErrorInvalidValue;
  emu::Capture& c = emu::g_captures[s];
  c.id = ++emu::g_captures_begun;
  c.thread = std::this_thread::get_id();
  c.mode = mode;
  return cudaSuccess;
}
inline cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* graph) {
  std::lock_guard<std::mutex> lock(emu::g_capture_mu);
  auto it = emu::g_captures.find(s);
  *graph = nullptr;
  if (it == emu::g_captures.end()) return cudaErrorInvalidValue;
  bool invalid = it->second.invalidated;
  if (!invalid) {
    *graph = new emu::Graph();
    (*graph)->ops = std::move(it->second.ops);
    (*graph)->names = std::move(it->second.names);
    (*graph)->id = it->second.id;
    (*graph)->blocks = std::move(it->second.blocks);
  }
  emu::g_captures.erase(it);
  return invalid ? cudaErrorStreamCaptureInvalidated : cudaSuccess;
}
inline cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph,
                                        unsigned long long) {
  *exec = new emu::Graph(*graph);
  std::lock_guard<std::recursive_mutex> lock(emu::g_exec_mu);
  emu::g_live_execs.insert(*exec);
  return cudaSuccess;
}
inline cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s) {
  emu::Graph* g = exec;
  emu::enqueue(s, [g] { emu::run_graph(*g); });
  return cudaSuccess;
}
inline cudaError_t cudaGraphDestroy(cudaGraph_t g) {
  delete g;
  return cudaSuccess;
}
inline cudaError_t cudaGraphExecDestroy(cudaGraphExec_t g) {
  emu::drain_all("cudaGraphExecDestroy");  // queued launches of it run first
  emu::destroy_exec(g);
  return cudaSuccess;
}
#include "emu_racecheck.h"  // run_launch, declared in emu_core.h
