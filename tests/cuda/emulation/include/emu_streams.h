// Streams, events and stream capture for the CPU emulation of CUDA (../README.md).
//
// A stream is a queue. An operation (a launch, a copy, a memset, a cuBLAS or cuDNN call, an
// event record, a wait for an event) is appended to its stream's queue and runs later, as on a
// GPU: after each call the host makes, the device "working in the background" runs queued work
// until a random lag is left (background_progress), and the rest runs when the host
// synchronises (cudaStreamSynchronize, cudaEventSynchronize, cudaFree, a copy into pageable
// memory...). Which stream moves next follows random priorities redrawn every few operations
// (run_one), so two streams interleave differently each time. The orderings CUDA promises hold
// and no others: operations of one stream run in order; a cudaStreamWaitEvent holds its stream
// until the event's latest record (as of the wait) has run; an event is not complete until its
// stream reaches it; the legacy default stream (nullptr) waits for, and is waited for by,
// blocking streams only (Freight's are non-blocking). Code that reads a result on the host without
// waiting, or a second stream that reads a buffer without an event wait, gets stale data in
// some interleaving, as on a GPU. EMU_STREAM_SEED picks the interleavings; EMU_STREAMS=eager
// runs every operation at once (the old model, to tell an ordering bug from another one).
//
// While a stream is being captured into a graph, its operations are recorded instead (by
// value) and run at each cudaGraphLaunch, never at capture time. CUDA's capture rules are
// enforced where Freight relies on them (cuda_runtime.h).
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define EMU_ALLOCATOR_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMU_ALLOCATOR_ASAN 1
#endif
#endif
#ifdef EMU_ALLOCATOR_ASAN
#include <sanitizer/asan_interface.h>
#endif

namespace emu {

// ---------------------------------------------------------------- capture
struct Range {
  char* p;
  size_t n;
};
// A capture in progress on a stream: the operations recorded so far, the capturing thread,
// the memory it allocated, and whether an unsupported call has invalidated it.
struct Capture {
  std::vector<std::function<void()>> ops;
  std::vector<const char*> names;  // of the operations, for messages
  std::vector<Range> blocks;
  uint64_t id = 0;
  std::thread::id thread;
  int mode = 0;  // cudaStreamCaptureMode
  bool invalidated = false;
};
inline std::mutex g_capture_mu;
inline std::map<void*, Capture> g_captures;  // by stream
inline thread_local int t_capture_mode = 0;  // this thread's mode (cudaThreadExchange...)

inline bool capturing(void* stream) {
  std::lock_guard<std::mutex> lock(g_capture_mu);
  return stream && g_captures.count(stream) > 0;
}

// A potentially unsafe call (cudaMalloc, cudaFree, a synchronisation) made by this thread: it
// invalidates a capture of this thread unless this thread's mode is relaxed (ThreadLocal and
// Global captures; a Global capture is affected from any thread), as on a GPU. Returns true
// when the call is refused.
inline bool unsafe_call_refused() {
  std::lock_guard<std::mutex> lock(g_capture_mu);
  if (t_capture_mode == 2) return false;  // cudaStreamCaptureModeRelaxed
  bool refused = false;
  for (auto& [stream, c] : g_captures) {
    if (c.mode == 2) continue;
    if (c.thread == std::this_thread::get_id() || c.mode == 0) {
      c.invalidated = true;
      refused = true;
    }
  }
  return refused;
}

// ---------------------------------------------------------------- queues
// An event: how many times it was recorded, and how many of those records have run.
struct EventState {
  uint64_t recorded = 0, completed = 0;
  double ms = 0;  // host time when its latest record ran (cudaEventElapsedTime)
};
struct EventHandle {
  std::shared_ptr<EventState> state = std::make_shared<EventState>();
};

struct QueuedOp {
  std::function<void()> run;         // empty for a wait
  std::shared_ptr<EventState> wait;  // cudaStreamWaitEvent: runs once wait->completed >= gen
  uint64_t wait_gen = 0;
  uint64_t seq = 0;  // queued order over all streams (the legacy stream's implicit waits)
};
struct StreamQueue {
  std::deque<QueuedOp> ops;
  bool blocking = false;  // created without cudaStreamNonBlocking: ordered with stream nullptr
  uint64_t priority = 0;  // run_one
};

// The queues and the running of an operation (one at a time: blocks run on one emulated GPU).
inline std::recursive_mutex g_exec_mu;
inline std::map<void*, StreamQueue> g_queues;  // by stream; nullptr is the legacy stream
inline uint64_t g_next_seq = 1;

inline bool eager_streams() {
  static const bool eager = [] {
    const char* e = std::getenv("EMU_STREAMS");
    return e && std::string_view(e) == "eager";
  }();
  return eager;
}

// xorshift64, seeded by EMU_STREAM_SEED plus the MPI rank (OpenMPI's variable), so the ranks of
// an emulated job interleave their streams differently.
inline uint64_t stream_random() {
  static uint64_t s = [] {
    const char* e = std::getenv("EMU_STREAM_SEED");
    const char* r = std::getenv("OMPI_COMM_WORLD_RANK");
    uint64_t v = (e ? std::strtoull(e, nullptr, 10) : 0) + (r ? std::strtoull(r, nullptr, 10) : 0);
    return (v * 0x9E3779B97F4A7C15ull) ^ 0x2545F4914F6CDD1Dull;
  }();
  s ^= s << 13;
  s ^= s >> 7;
  s ^= s << 17;
  return s;
}

// ASan poisoning that waits for the work queued before it: a block given back to a cache may
// still be used by operations queued earlier (stream order makes that correct on a GPU), so it
// is poisoned only once every operation queued before the free has run. Handing the block out
// again, or freeing it, cancels a poisoning that has not happened yet (emu_allocator.h).
struct PendingPoison {
  char* p;
  size_t n;
  uint64_t after_seq;  // every operation with seq <= this must have run
};
inline std::vector<PendingPoison> g_pending_poison;
inline void poison_now(void* p, size_t n) {
#ifdef EMU_ALLOCATOR_ASAN
  ASAN_POISON_MEMORY_REGION(p, n);
#else
  (void)p, (void)n;
#endif
}

inline void defer_poison(void* p, size_t n) {
  std::lock_guard<std::recursive_mutex> lock(g_exec_mu);
  if (n) g_pending_poison.push_back({static_cast<char*>(p), n, g_next_seq - 1});
}
inline void cancel_poison(void* p, size_t n) {
  std::lock_guard<std::recursive_mutex> lock(g_exec_mu);
  char* lo = static_cast<char*>(p);
  std::erase_if(g_pending_poison,
                [&](const PendingPoison& q) { return q.p < lo + n && lo < q.p + q.n; });
}
inline void settle_poison() {
  if (g_pending_poison.empty()) return;
  uint64_t oldest = UINT64_MAX;  // the oldest operation still queued
  for (auto& [stream, q] : g_queues)
    if (!q.ops.empty() && q.ops.front().seq < oldest) oldest = q.ops.front().seq;
  std::erase_if(g_pending_poison, [&](const PendingPoison& q) {
    if (q.after_seq >= oldest) return false;
    poison_now(q.p, q.n);
    return true;
  });
}

inline bool head_may_run(void* stream, const StreamQueue& q) {
  if (q.ops.empty()) return false;
  const QueuedOp& op = q.ops.front();
  if (op.wait && op.wait->completed < op.wait_gen) return false;
  if (stream == nullptr) {
    for (auto& [s, other] : g_queues)
      if (s && other.blocking && !other.ops.empty() && other.ops.front().seq < op.seq) return false;
  } else if (q.blocking) {
    auto legacy = g_queues.find(nullptr);
    if (legacy != g_queues.end() && !legacy->second.ops.empty() &&
        legacy->second.ops.front().seq < op.seq)
      return false;
  }
  return true;
}

// Runs the first operation of the stream that may move and has the highest priority; false
// when none may. Priorities are drawn afresh every few operations, so for a stretch one stream
// runs ahead of another as far as the waits allow (which is what exposes a missing wait: the
// reader's stream gets ahead of the writer's), and the other way round in the next stretch.
inline bool run_one() {
  std::lock_guard<std::recursive_mutex> lock(g_exec_mu);
  static unsigned until_redraw = 0;
  if (until_redraw-- == 0) {
    for (auto& [s, q] : g_queues) q.priority = stream_random();
    until_redraw = unsigned(stream_random() % 16);
  }
  StreamQueue* best = nullptr;
  for (auto& [s, q] : g_queues)
    if (head_may_run(s, q) && (!best || q.priority > best->priority)) best = &q;
  if (!best) return false;
  StreamQueue& q = *best;
  QueuedOp op = std::move(q.ops.front());
  q.ops.pop_front();
  if (op.run) op.run();
  settle_poison();
  return true;
}

// Runs queued operations until done() holds. An operation that can never run (a wait for an
// event whose record is not queued anywhere) is reported, naming `what`.
template <class Done>
void run_until(Done done, const char* what) {
  std::lock_guard<std::recursive_mutex> lock(g_exec_mu);
  while (!done())
    if (!run_one()) {
      std::fprintf(stderr, "CUDA emulation: %s waits for work that can never run\n", what);
      std::abort();
    }
}
inline bool all_idle() {
  for (auto& [s, q] : g_queues)
    if (!q.ops.empty()) return false;
  return true;
}
inline void drain_all(const char* what) {
  run_until(all_idle, what);
}
inline void drain_stream(void* stream, const char* what) {
  run_until([stream] { return g_queues[stream].ops.empty(); }, what);
}

// What the device gets done while the host makes one call: it runs until only `lag`
// operations are left queued, a lag drawn afresh every few calls (0 to 12 operations behind the
// host), so the work a call queues sometimes runs at once and sometimes waits for work queued
// after it on another stream.
inline size_t queued_ops();
inline void background_progress() {
  std::lock_guard<std::recursive_mutex> lock(g_exec_mu);
  static size_t lag = 0;
  static unsigned calls_left = 0;
  if (calls_left-- == 0) {
    lag = eager_streams() ? 0 : size_t(stream_random() % 13);
    calls_left = unsigned(stream_random() % 32);
  }
  while (queued_ops() > lag && run_one()) {
  }
}

inline void push(void* stream, QueuedOp op) {
  std::lock_guard<std::recursive_mutex> lock(g_exec_mu);
  op.seq = g_next_seq++;
  g_queues[stream].ops.push_back(std::move(op));
  background_progress();
}

// Queues `op` on `stream`, or records it when `stream` is being captured. `name` (a string
// that lives as long as the program) names it in messages.
inline void enqueue(void* stream, std::function<void()> op, const char* name = "an operation") {
  {
    std::lock_guard<std::mutex> lock(g_capture_mu);
    auto it = stream ? g_captures.find(stream) : g_captures.end();
    if (it != g_captures.end()) {
      it->second.ops.push_back(std::move(op));
      it->second.names.push_back(name);
      return;
    }
  }
  push(stream, QueuedOp{std::move(op), nullptr, 0, 0});
}

inline std::string stream_name(void* stream) {
  if (!stream) return "0 (the legacy default stream)";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", stream);
  return buf;
}

// Operations queued and not yet run, all streams together.
inline size_t queued_ops() {
  std::lock_guard<std::recursive_mutex> lock(g_exec_mu);
  size_t n = 0;
  for (auto& [s, q] : g_queues) n += q.ops.size();
  return n;
}

}  // namespace emu
