// CUDA graphs in the CPU emulation, with a check of what a graph writes (../README.md).
//
// A graph is the list of operations its capture recorded, run in order at each launch. The
// memory a capture allocates (cudaMalloc in relaxed mode: Freight's graph pools take fresh
// blocks only) is the graph's own. The first launch of an instantiated graph records which bytes
// of that memory its nodes write (a snapshot before, a comparison after): its write set. While
// the graph lives, nothing outside it may write there: a copy or memset outside any graph into
// the write set fails at once; one made there between the capture and the first launch fails at
// that launch; a kernel outside the graph that wrote there is found at the graph's next launch or
// its destruction (the write set no longer holds what the graph left). Each failure names the
// graph and the writer. This is the bug where a graph's temporary block doubles as host-side
// state (issue 12's optimizer table): every replay silently overwrites it.
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "emu_streams.h"

namespace emu {

struct Graph {
  std::vector<std::function<void()>> ops;
  std::vector<const char*> names;  // of the operations
  uint64_t id = 0;                 // capture number, for messages
  std::vector<Range> blocks;       // allocated during its capture
  bool launched = false;           // the write set is known
  std::vector<Range> writes;       // bytes of `blocks` that its first launch changed
  std::vector<char> left;          // the bytes of `writes` as its last launch left them
};

inline std::set<Graph*> g_live_execs;
inline std::vector<Range> g_capture_blocks;  // of every live capture, graph and instance
// Copies and memsets outside any graph into capture blocks, checked at the first launch.
struct OutsideWrite {
  Range r;
  std::string what;
};
inline std::vector<OutsideWrite> g_outside_writes;
inline bool g_in_graph = false;  // a graph's operations are running

// A graph's memory may hold bytes that AddressSanitizer poisons (the slack past a graph constant
// in the rounded allocator mode), so the checks read it uninstrumented, a byte at a time.
__attribute__((no_sanitize_address)) inline char raw_byte(const char* p) {
  return *static_cast<const volatile char*>(p);
}
inline std::vector<char> raw_bytes(const char* p, size_t n) {
  std::vector<char> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = raw_byte(p + i);
  return out;
}
// The first i < n with p[i] != q[i], or n.
inline size_t raw_mismatch(const char* p, const char* q, size_t n) {
  size_t i = 0;
  while (i < n && raw_byte(p + i) == q[i]) ++i;
  return i;
}

inline bool overlaps(const Range& a, const char* p, size_t n) {
  return a.p < p + n && p < a.p + a.n;
}

[[noreturn]] inline void write_set_violation(const Graph& g, const Range& w, const char* p,
                                             size_t n, const std::string& who) {
  std::fprintf(stderr,
               "CUDA emulation: graph #%llu writes %zu bytes at %p (memory its capture "
               "allocated), and %s wrote %zu bytes at %p outside the graph: memory that a live "
               "graph writes must not be used outside it\n",
               (unsigned long long)g.id, w.n, static_cast<void*>(w.p), who.c_str(), n,
               static_cast<const void*>(p));
  std::abort();
}

// A cudaMalloc during a capture by this thread: the capture's memory.
inline void note_capture_block(void* p, size_t n) {
  std::lock_guard<std::mutex> lock(g_capture_mu);
  for (auto& [stream, c] : g_captures)
    if (c.thread == std::this_thread::get_id()) {
      c.blocks.push_back({static_cast<char*>(p), n});
      std::lock_guard<std::recursive_mutex> exec(g_exec_mu);
      g_capture_blocks.push_back({static_cast<char*>(p), n});
      return;
    }
}
inline void forget_capture_block(void* p) {
  std::lock_guard<std::recursive_mutex> lock(g_exec_mu);
  std::erase_if(g_capture_blocks, [p](const Range& r) { return r.p == p; });
}

// A copy or memset that has just run (called from the operation itself).
inline void note_write(void* dst, size_t n, const std::string& what) {
  if (g_in_graph || n == 0) return;
  const char* p = static_cast<const char*>(dst);
  for (Graph* g : g_live_execs)
    if (g->launched)
      for (const Range& w : g->writes)
        if (overlaps(w, p, n)) write_set_violation(*g, w, p, n, what);
  for (const Range& b : g_capture_blocks)
    if (overlaps(b, p, n)) {
      g_outside_writes.push_back({{static_cast<char*>(dst), n}, what});
      return;
    }
}

// The write set must still hold what the graph's last launch left there.
inline void check_left(const Graph& g, const char* when) {
  size_t at = 0;
  for (const Range& w : g.writes) {
    size_t i = raw_mismatch(w.p, g.left.data() + at, w.n);
    if (i < w.n) {
      std::fprintf(stderr,
                   "CUDA emulation: graph #%llu writes %zu bytes at %p (memory its capture "
                   "allocated), and something outside the graph (a kernel: copies and memsets "
                   "are checked as they run) changed the byte at %p %s: memory that a live graph "
                   "writes must not be used outside it\n",
                   (unsigned long long)g.id, w.n, static_cast<void*>(w.p),
                   static_cast<void*>(w.p + i), when);
      std::abort();
    }
    at += w.n;
  }
}
inline void keep_left(Graph& g) {
  g.left.clear();
  for (const Range& w : g.writes) {
    std::vector<char> bytes = raw_bytes(w.p, w.n);
    g.left.insert(g.left.end(), bytes.begin(), bytes.end());
  }
}

// One launch of an instance, as a queued operation.
inline void run_graph(Graph& g) {
  std::lock_guard<std::recursive_mutex> lock(g_exec_mu);
  std::vector<std::vector<char>> before;
  // What outside writes left in the graph's memory before its first launch: a node that
  // changes it is reported as it happens, before a kernel can crash on what it overwrote.
  std::vector<std::pair<const OutsideWrite*, std::vector<char>>> outside;
  if (!g.launched) {
    for (const Range& b : g.blocks) before.push_back(raw_bytes(b.p, b.n));
    for (const OutsideWrite& o : g_outside_writes)
      for (const Range& b : g.blocks)
        if (overlaps(b, o.r.p, o.r.n)) {
          outside.push_back({&o, raw_bytes(o.r.p, o.r.n)});
          break;
        }
  } else {
    check_left(g, "between two of its launches");
  }
  g_in_graph = true;
  for (size_t k = 0; k < g.ops.size(); ++k) {
    g.ops[k]();
    for (auto& [o, bytes] : outside)
      if (raw_mismatch(o->r.p, bytes.data(), o->r.n) < o->r.n) {
        std::fprintf(stderr,
                     "CUDA emulation: graph #%llu, node %zu (%s), overwrote %zu bytes at %p that "
                     "%s wrote outside the graph before its first launch: memory that a live "
                     "graph writes must not be used outside it\n",
                     (unsigned long long)g.id, k, g.names[k], o->r.n, static_cast<void*>(o->r.p),
                     o->what.c_str());
        std::abort();
      }
  }
  g_in_graph = false;
  if (!g.launched) {
    g.launched = true;
    for (size_t k = 0; k < g.blocks.size(); ++k) {
      const Range& b = g.blocks[k];
      for (size_t i = 0; i < b.n;) {
        if (raw_byte(b.p + i) == before[k][i]) {
          ++i;
          continue;
        }
        size_t j = i + 1;  // a run of changed bytes, small gaps included
        for (size_t gap = 0; j < b.n && gap < 16; ++j)
          gap = raw_byte(b.p + j) == before[k][j] ? gap + 1 : 0;
        while (raw_byte(b.p + j - 1) == before[k][j - 1]) --j;
        g.writes.push_back({b.p + i, j - i});
        i = j;
      }
    }
    for (const OutsideWrite& o : g_outside_writes)
      for (const Range& w : g.writes)
        if (overlaps(w, o.r.p, o.r.n))
          write_set_violation(g, w, o.r.p, o.r.n, o.what + " (before the graph's first launch)");
  }
  keep_left(g);
}

inline void destroy_exec(Graph* g) {
  std::lock_guard<std::recursive_mutex> lock(g_exec_mu);
  if (g->launched) check_left(*g, "after its last launch");
  g_live_execs.erase(g);
  for (const Range& b : g->blocks) {
    std::erase_if(g_outside_writes,
                  [&](const OutsideWrite& o) { return overlaps(b, o.r.p, o.r.n); });
    bool still_used = false;  // by the graph it came from or another instance
    for (Graph* other : g_live_execs)
      for (const Range& ob : other->blocks) still_used |= ob.p == b.p;
    if (!still_used) forget_capture_block(b.p);
  }
  delete g;
}

}  // namespace emu
