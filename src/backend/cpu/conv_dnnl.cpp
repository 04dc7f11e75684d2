// The oneDNN convolution engine (conv_dnnl.h).
//
// oneDNN's fast CPU convolutions read and write channel-blocked layouts (nChw16c: 16 channels of
// a pixel side by side, one vector), where Freight keeps NCHW. Each pass therefore reorders its
// NCHW operands into the layouts the primitive asked for ("any" at creation), runs, and reorders
// its result back; where the primitive takes a plain layout (a first layer's 3-channel input),
// the tensor is used in place. The blocked copies and oneDNN's scratchpad live in one arena per
// pass, taken from Freight's CPU allocator for the pass only, so the engine's memory is one
// pass's operands at a time and shows in Freight's memory figures.
//
// Primitives are created once per (geometry, pass, thread count) and cached: oneDNN picks its
// blocking for the thread count it is created with, and creation takes milliseconds. One mutex
// guards the cache and the stream, so two convolutions on different host threads take turns.
#include "backend/cpu/conv_dnnl.h"

#if FREIGHT_HAVE_DNNL
#include <omp.h>

#include <algorithm>
#include <array>
#include <dnnl.hpp>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>
#endif

#include <fmt/format.h>

#include "core/backend.h"
#include "freight/error.h"

namespace freight::cpu {

#if FREIGHT_HAVE_DNNL
namespace {
using namespace dnnl;
using tag = memory::format_tag;
using dt = memory::data_type;

// Offsets in a pass's arena keep each operand on its own cache lines.
constexpr size_t kArenaAlign = 64;
// Cached passes at most (a zoo model has a few dozen).
constexpr size_t kMaxCachedPasses = 512;

// One operand of a pass: the user's plain tensor and, when the primitive wants another layout,
// the reorder into (or out of) its place in the arena.
struct Operand {
  memory::desc user, wanted;
  bool plain = true;  // the primitive takes the user's layout: no copy
  reorder to_wanted, to_user;
  size_t offset = 0;  // of the blocked copy in the arena
};

struct Pass {
  primitive conv;
  std::vector<std::pair<int, Operand>> operands;  // by DNNL_ARG_*
  memory::desc scratch;
  size_t scratch_offset = 0, bytes = 0;  // arena bytes the pass needs
};

// The geometry's fields, the pass, the thread count, whether the bias is wanted and the algorithm.
using Key = std::array<int64_t, 19>;

struct State {
  std::mutex mutex;
  engine eng{engine::kind::cpu, 0};
  stream st{eng};
  std::map<Key, std::unique_ptr<Pass>> passes;  // null: oneDNN refused the geometry
};

// A pass's blocked operands and scratchpad, from the CPU backend's caching allocator: counted in
// the device's memory (the peaks that `freight bench` reports) while the pass runs, and reused
// by the next pass without fresh pages.
struct Arena {
  DeviceBackend& backend = backend_for(DeviceType::CPU);
  size_t bytes;
  char* data;
  explicit Arena(size_t n) : bytes(std::max<size_t>(n, 1)) {
    data = static_cast<char*>(backend.allocate(bytes, 0));
  }
  ~Arena() { backend.deallocate(data, bytes, 0); }
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
};

// Constructed on the first convolution, so a program that never runs one pays nothing.
State& state() {
  static State s;
  return s;
}

size_t round_up(size_t v) {
  return (v + kArenaAlign - 1) / kArenaAlign * kArenaAlign;
}

// oneDNN's shapes of the convolution. Its dilation counts the gaps (Freight's 1 is its 0), and
// its right padding is whatever makes the output size Freight's (it may be below the left one
// when the last window stops short of the edge).
struct Dims {
  memory::dims x, w, y, b, strides, dilation, pad_l, pad_r;
  explicit Dims(const Conv2dGeometry& g)
      : x{g.n, g.c, g.h, g.w},
        w{g.o, g.c, g.kh, g.kw},
        y{g.n, g.o, g.oh, g.ow},
        b{g.o},
        strides{g.sh, g.sw},
        dilation{g.dh - 1, g.dw - 1},
        pad_l{g.ph, g.pw},
        pad_r{(g.oh - 1) * g.sh + (g.kh - 1) * g.dh + 1 - g.h - g.ph,
              (g.ow - 1) * g.sw + (g.kw - 1) * g.dw + 1 - g.w - g.pw} {}
};

algorithm of(DnnlAlgorithm a) {
  return a == DnnlAlgorithm::Winograd ? algorithm::convolution_winograd
                                      : algorithm::convolution_direct;
}

convolution_forward::primitive_desc forward_pd(const Dims& d, bool bias, algorithm alg,
                                               const engine& eng, const primitive_attr& attr) {
  const memory::desc x(d.x, dt::f32, tag::any), w(d.w, dt::f32, tag::any),
      y(d.y, dt::f32, tag::any), b(d.b, dt::f32, tag::x);
  auto desc = bias ? convolution_forward::desc(prop_kind::forward_training, alg, x, w, b, y,
                                               d.strides, d.dilation, d.pad_l, d.pad_r)
                   : convolution_forward::desc(prop_kind::forward_training, alg, x, w, y, d.strides,
                                               d.dilation, d.pad_l, d.pad_r);
  return convolution_forward::primitive_desc(desc, attr, eng);
}

// Lays out the operand in the arena after `bytes` and builds its reorder(s).
Operand operand(const memory::desc& user, const memory::desc& wanted, bool in, bool out,
                const engine& eng, size_t& bytes) {
  Operand o;
  o.user = user;
  o.wanted = wanted;
  o.plain = user == wanted;
  if (o.plain) return o;
  o.offset = bytes;
  bytes += round_up(wanted.get_size());
  if (in) o.to_wanted = reorder(reorder::primitive_desc(eng, user, eng, wanted));
  if (out) o.to_user = reorder(reorder::primitive_desc(eng, wanted, eng, user));
  return o;
}

// Builds the primitive and reorders of one pass (0 forward, 1 input gradient, 2 weight
// gradient, its bias gradient with it when `bias`).
std::unique_ptr<Pass> build(const Conv2dGeometry& g, int pass, bool bias, algorithm alg,
                            const engine& eng) {
  const Dims d(g);
  primitive_attr attr;
  attr.set_scratchpad_mode(scratchpad_mode::user);
  const memory::desc ux(d.x, dt::f32, tag::nchw), uw(d.w, dt::f32, tag::oihw),
      uy(d.y, dt::f32, tag::nchw), ub(d.b, dt::f32, tag::x);
  auto p = std::make_unique<Pass>();
  size_t& bytes = p->bytes;
  if (pass == 0) {
    const auto pd = forward_pd(d, bias, alg, eng, attr);
    p->conv = convolution_forward(pd);
    p->operands.emplace_back(DNNL_ARG_SRC, operand(ux, pd.src_desc(), true, false, eng, bytes));
    p->operands.emplace_back(DNNL_ARG_WEIGHTS,
                             operand(uw, pd.weights_desc(), true, false, eng, bytes));
    if (bias) p->operands.emplace_back(DNNL_ARG_BIAS, operand(ub, ub, true, false, eng, bytes));
    p->operands.emplace_back(DNNL_ARG_DST, operand(uy, pd.dst_desc(), false, true, eng, bytes));
    p->scratch = pd.scratchpad_desc();
  } else if (pass == 1) {
    const auto hint = forward_pd(d, false, alg, eng, primitive_attr());
    const convolution_backward_data::primitive_desc pd(
        convolution_backward_data::desc(
            alg, memory::desc(d.x, dt::f32, tag::any), memory::desc(d.w, dt::f32, tag::any),
            memory::desc(d.y, dt::f32, tag::any), d.strides, d.dilation, d.pad_l, d.pad_r),
        attr, eng, hint);
    p->conv = convolution_backward_data(pd);
    p->operands.emplace_back(DNNL_ARG_DIFF_DST,
                             operand(uy, pd.diff_dst_desc(), true, false, eng, bytes));
    p->operands.emplace_back(DNNL_ARG_WEIGHTS,
                             operand(uw, pd.weights_desc(), true, false, eng, bytes));
    p->operands.emplace_back(DNNL_ARG_DIFF_SRC,
                             operand(ux, pd.diff_src_desc(), false, true, eng, bytes));
    p->scratch = pd.scratchpad_desc();
  } else {
    const auto hint = forward_pd(d, bias, alg, eng, primitive_attr());
    const memory::desc x(d.x, dt::f32, tag::any), w(d.w, dt::f32, tag::any),
        y(d.y, dt::f32, tag::any), b(d.b, dt::f32, tag::x);
    auto desc = bias ? convolution_backward_weights::desc(alg, x, w, b, y, d.strides, d.dilation,
                                                          d.pad_l, d.pad_r)
                     : convolution_backward_weights::desc(alg, x, w, y, d.strides, d.dilation,
                                                          d.pad_l, d.pad_r);
    const convolution_backward_weights::primitive_desc pd(desc, attr, eng, hint);
    p->conv = convolution_backward_weights(pd);
    p->operands.emplace_back(DNNL_ARG_SRC, operand(ux, pd.src_desc(), true, false, eng, bytes));
    p->operands.emplace_back(DNNL_ARG_DIFF_DST,
                             operand(uy, pd.diff_dst_desc(), true, false, eng, bytes));
    p->operands.emplace_back(DNNL_ARG_DIFF_WEIGHTS,
                             operand(uw, pd.diff_weights_desc(), false, true, eng, bytes));
    if (bias)
      p->operands.emplace_back(DNNL_ARG_DIFF_BIAS, operand(ub, ub, false, true, eng, bytes));
    p->scratch = pd.scratchpad_desc();
  }
  p->scratch_offset = bytes;
  bytes += round_up(p->scratch.get_size());
  return p;
}

void execute(State& s, Pass& p, const std::vector<std::pair<int, const float*>>& user);

// oneDNN picks its blocking (and its OpenMP team) by omp_get_max_threads(), at creation and at
// each run; the calling thread's setting is put back afterwards.
struct ThreadsFor {
  int saved = omp_get_max_threads();
  explicit ThreadsFor(int threads) { omp_set_num_threads(threads); }
  ~ThreadsFor() { omp_set_num_threads(saved); }
  ThreadsFor(const ThreadsFor&) = delete;
  ThreadsFor& operator=(const ThreadsFor&) = delete;
};

// The cached pass, built on first use; null when oneDNN refuses the geometry. The caller holds
// the mutex and has set the thread count.
Pass* find_or_build(State& s, const Conv2dGeometry& g, int pass, bool bias, int threads,
                    DnnlAlgorithm alg) {
  const Key key{g.n,  g.c,  g.h,  g.w,  g.o,  g.kh, g.kw,    g.oh,          g.ow,        g.sh,
                g.sw, g.ph, g.pw, g.dh, g.dw, pass, threads, int64_t(bias), int64_t(alg)};
  auto it = s.passes.find(key);
  if (it == s.passes.end()) {
    std::unique_ptr<Pass> built;
    try {
      built = build(g, pass, bias, of(alg), s.eng);
    } catch (const dnnl::error&) {
      // Refused (an unusual padding, a shape no implementation takes): the caller's engine runs.
    }
    // Every distinct shape adds an entry (a last batch of another size, images of many sizes);
    // past a bound the cache starts over rather than grow without end.
    if (s.passes.size() >= kMaxCachedPasses) s.passes.clear();
    it = s.passes.emplace(key, std::move(built)).first;
  }
  return it->second.get();
}

// Runs one pass: `user` holds the user's pointer of each operand, by DNNL_ARG_*.
bool run(const Conv2dGeometry& g, int pass, bool bias, int threads, DnnlAlgorithm alg,
         const std::vector<std::pair<int, const float*>>& user) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  const ThreadsFor team(threads);
  Pass* p = find_or_build(s, g, pass, bias, threads, alg);
  if (!p) return false;
  try {
    execute(s, *p, user);
  } catch (const dnnl::error& e) {
    throw Error(fmt::format(
        "conv2d {} on oneDNN ({}) failed: {} (status {}); input [{}, {}, {}, {}], weight [{}, {}, "
        "{}, "
        "{}], stride ({}, {}), padding ({}, {}), dilation ({}, {}); FREIGHT_CONV_DNNL=0 runs "
        "Freight's own engines",
        pass == 0   ? "forward"
        : pass == 1 ? "input gradient"
                    : "weight gradient",
        alg == DnnlAlgorithm::Winograd ? "Winograd" : "direct", e.what(), int(e.status), g.n, g.c,
        g.h, g.w, g.o, g.c, g.kh, g.kw, g.sh, g.sw, g.ph, g.pw, g.dh, g.dw));
  }
  return true;
}

// The reorders in, the primitive, the reorders out, on the pass's arena.
void execute(State& s, Pass& p, const std::vector<std::pair<int, const float*>>& user) {
  Arena held(p.bytes);
  char* arena = held.data;
  std::unordered_map<int, memory> args;
  args.emplace(DNNL_ARG_SCRATCHPAD, memory(p.scratch, s.eng, arena + p.scratch_offset));
  std::vector<std::pair<const Operand*, std::pair<memory, memory>>> outputs;
  for (const auto& [arg, op] : p.operands) {
    const float* ptr = nullptr;
    for (const auto& [a, u] : user)
      if (a == arg) ptr = u;
    memory um(op.user, s.eng, const_cast<float*>(ptr));
    if (op.plain) {
      args.emplace(arg, um);
      continue;
    }
    memory wm(op.wanted, s.eng, arena + op.offset);
    if (op.to_wanted) op.to_wanted.execute(s.st, um, wm);
    if (op.to_user) outputs.push_back({&op, {wm, um}});
    args.emplace(arg, wm);
  }
  p.conv.execute(s.st, args);
  for (auto& [op, mems] : outputs) op->to_user.execute(s.st, mems.first, mems.second);
  s.st.wait();
}
}  // namespace

bool dnnl_conv_built() {
  return true;
}
std::string dnnl_conv_version() {
  const dnnl_version_t* v = dnnl_version();
  return fmt::format("oneDNN {}.{}.{}", v->major, v->minor, v->patch);
}

bool dnnl_winograd_runs() {
  static const bool runs = [] {
    const Conv2dGeometry g{1, 16, 8, 8, 16, 3, 3, 8, 8, 1, 1, 1, 1, 1, 1};
    try {
      forward_pd(Dims(g), true, algorithm::convolution_winograd, state().eng, primitive_attr());
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return runs;
}
bool dnnl_conv_forward(const float* x, const float* w, const float* b, const Conv2dGeometry& g,
                       float* y, int threads, DnnlAlgorithm algorithm) {
  return run(g, 0, b != nullptr, threads, algorithm,
             {{DNNL_ARG_SRC, x}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_BIAS, b}, {DNNL_ARG_DST, y}});
}
bool dnnl_conv_backward_input(const float* gy, const float* w, const Conv2dGeometry& g, float* dx,
                              int threads, DnnlAlgorithm algorithm) {
  return run(g, 1, false, threads, algorithm,
             {{DNNL_ARG_DIFF_DST, gy}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_DIFF_SRC, dx}});
}
bool dnnl_conv_backward_weight(const float* gy, const float* x, const Conv2dGeometry& g, float* dw,
                               float* db, int threads, DnnlAlgorithm algorithm) {
  return run(g, 2, db != nullptr, threads, algorithm,
             {{DNNL_ARG_SRC, x},
              {DNNL_ARG_DIFF_DST, gy},
              {DNNL_ARG_DIFF_WEIGHTS, dw},
              {DNNL_ARG_DIFF_BIAS, db}});
}
int64_t dnnl_conv_arena_bytes(const Conv2dGeometry& g, int pass, int threads,
                              DnnlAlgorithm algorithm) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  const ThreadsFor team(threads);
  const Pass* p = find_or_build(s, g, pass, pass != 1, threads, algorithm);
  return p ? int64_t(p->bytes) : -1;
}

#else  // no oneDNN in this build: nothing picks the engine (see conv_cpu.cpp)

bool dnnl_conv_built() {
  return false;
}
std::string dnnl_conv_version() {
  return "no oneDNN (not found when Freight was configured: Debian's libdnnl-dev)";
}
bool dnnl_winograd_runs() {
  return false;
}
bool dnnl_conv_forward(const float*, const float*, const float*, const Conv2dGeometry&, float*, int,
                       DnnlAlgorithm) {
  return false;
}
bool dnnl_conv_backward_input(const float*, const float*, const Conv2dGeometry&, float*, int,
                              DnnlAlgorithm) {
  return false;
}
bool dnnl_conv_backward_weight(const float*, const float*, const Conv2dGeometry&, float*, float*,
                               int, DnnlAlgorithm) {
  return false;
}
int64_t dnnl_conv_arena_bytes(const Conv2dGeometry&, int, int, DnnlAlgorithm) {
  return -1;
}
#endif

}  // namespace freight::cpu
