// Layer tags and profiling hooks (freight/profiler.h): every recorded node carries the innermost
// module that was running, the hooks see properly nested layer spans and one span per backward
// node, and training with hooks installed gives bit-identical results to training without.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <map>

#include "freight/freight.h"
#include "freight/nn/model_file.h"
#include "freight/nn/nn.h"
#include "freight/profiler.h"
#include "freight/training.h"

namespace freight {
namespace {

using namespace freight::nn;

// Records what the hooks see.
struct Recorder : ProfileHooks {
  std::vector<std::pair<char, const void*>> layers;  // '(' enter, ')' exit
  std::vector<std::pair<const void*, std::string>> nodes;
  int backward_begins = 0, backward_ends = 0, open_nodes = 0, max_open_nodes = 0;
  void layer_enter(const void* l) override { layers.push_back({'(', l}); }
  void layer_exit(const void* l) override { layers.push_back({')', l}); }
  void backward_begin() override { ++backward_begins; }
  void backward_end() override { ++backward_ends; }
  void node_begin(const void* l, const char* op) override {
    nodes.push_back({l, op});
    max_open_nodes = std::max(max_open_nodes, ++open_nodes);
  }
  void node_end(const void*, const char*) override { --open_nodes; }
};

struct Installed {
  explicit Installed(ProfileHooks* h) { set_profile_hooks(h); }
  ~Installed() { set_profile_hooks(nullptr); }
};

TEST(Profiler, NodesCarryTheInnermostLayerAndSpansNest) {
  manual_seed(1);
  auto l1 = std::make_shared<Linear>(4, 3);
  auto relu = std::make_shared<ReLU>();
  auto l2 = std::make_shared<Linear>(3, 2);
  auto body = std::make_shared<Sequential>(std::initializer_list<ModulePtr>{l1, relu, l2});
  auto shortcut = std::make_shared<Linear>(4, 2);
  auto block = std::make_shared<Residual>(body, shortcut);
  Sequential model({block});
  Tensor x = Tensor::normal({5, 4});

  EXPECT_EQ(current_layer(), nullptr);
  Recorder rec;
  {
    Installed on(&rec);
    Tensor y = model(x);
    EXPECT_EQ(current_layer(), nullptr);  // every scope closed
    sum(y).backward();
  }
  // Forward spans: model ( block ( body ( l1 ) ( relu ) ( l2 ) ) ( shortcut ) ) ).
  std::vector<std::pair<char, const void*>> want{
      {'(', &model},      {'(', block.get()}, {'(', body.get()},     {'(', l1.get()},
      {')', l1.get()},    {'(', relu.get()},  {')', relu.get()},     {'(', l2.get()},
      {')', l2.get()},    {')', body.get()},  {'(', shortcut.get()}, {')', shortcut.get()},
      {')', block.get()}, {')', &model}};
  EXPECT_EQ(rec.layers, want);

  // Backward: one span per node, never nested, inside one backward span; each op's node carries
  // its own layer, the residual addition the block, the parameters' accumulators their layer.
  EXPECT_EQ(rec.backward_begins, 1);
  EXPECT_EQ(rec.backward_ends, 1);
  EXPECT_EQ(rec.max_open_nodes, 1);
  std::map<std::string, std::vector<const void*>> by_op;
  for (auto& [layer, op] : rec.nodes) by_op[op].push_back(layer);
  std::vector<const void*> linears = by_op["linear"];
  std::sort(linears.begin(), linears.end());
  std::vector<const void*> want_linears{l1.get(), l2.get(), shortcut.get()};
  std::sort(want_linears.begin(), want_linears.end());
  EXPECT_EQ(linears, want_linears);
  EXPECT_EQ(by_op["relu"], std::vector<const void*>{relu.get()});
  EXPECT_EQ(by_op["add"], std::vector<const void*>{block.get()});
  EXPECT_EQ(by_op["sum"], std::vector<const void*>{nullptr});  // outside any module
  std::map<const void*, int> acc;
  for (const void* l : by_op["accumulate_grad"]) acc[l]++;
  EXPECT_EQ(acc[l1.get()], 2);  // weight and bias
  EXPECT_EQ(acc[l2.get()], 2);
  EXPECT_EQ(acc[shortcut.get()], 2);
}

TEST(Profiler, ScopesRestoreTheOuterTagAndHooksAreOffByDefault) {
  EXPECT_EQ(profile_hooks(), nullptr);
  int a = 0, b = 0;
  {
    LayerScope sa(&a);
    EXPECT_EQ(current_layer(), &a);
    {
      LayerScope sb(&b);
      EXPECT_EQ(current_layer(), &b);
    }
    EXPECT_EQ(current_layer(), &a);
  }
  EXPECT_EQ(current_layer(), nullptr);
}

// Hooks that do what a profiler does (read the clock, synchronise, keep sums), to show that
// observing a step changes nothing in its results.
struct Timing : ProfileHooks {
  double sum = 0;
  std::chrono::steady_clock::time_point t;
  void tick() {
    synchronize(Device::cpu());
    auto now = std::chrono::steady_clock::now();
    sum += std::chrono::duration<double>(now - t).count();
    t = now;
  }
  void layer_enter(const void*) override { tick(); }
  void layer_exit(const void*) override { tick(); }
  void backward_begin() override { tick(); }
  void backward_end() override { tick(); }
  void node_begin(const void*, const char*) override { tick(); }
  void node_end(const void*, const char*) override { tick(); }
};

// Trains `steps` SGD steps of a zoo model on fixed random batches; returns its state_dict.
NamedTensors train_steps(const std::string& name, int steps, ProfileHooks* hooks) {
  manual_seed(7);
  ModelSpec spec = load_model_spec(name);
  ModulePtr model = build_model(spec);
  model->train();
  auto opt = make_optimizer("adam", model->parameters(), 1e-3, 0.9, 0.0);
  Generator g(3);
  Shape xs{8};
  xs.insert(xs.end(), spec.input_shape.begin(), spec.input_shape.end());
  Installed on(hooks);
  for (int i = 0; i < steps; ++i) {
    Tensor x = Tensor::normal(xs, 0, 1, DType::F32, Device::cpu(), &g);
    Tensor y = Tensor::randint({8}, 0, spec.classes, Device::cpu(), &g);
    opt->zero_grad();
    model_loss(spec, (*model)(x), y).backward();
    opt->step();
  }
  return model->state_dict();
}

TEST(Profiler, ProfiledTrainingIsBitIdentical) {
  for (const char* name : {"lenet5", "lstm-rows", "fashion-cnn"}) {
    NamedTensors plain = train_steps(name, 3, nullptr);
    Timing timing;
    NamedTensors profiled = train_steps(name, 3, &timing);
    EXPECT_GT(timing.sum, 0);
    ASSERT_EQ(plain.size(), profiled.size());
    for (size_t i = 0; i < plain.size(); ++i) {
      const Tensor &a = plain[i].second, &b = profiled[i].second;
      ASSERT_EQ(a.shape(), b.shape()) << name << " " << plain[i].first;
      ASSERT_EQ(a.nbytes(), b.nbytes());
      EXPECT_EQ(std::memcmp(a.contiguous().data_ptr(), b.contiguous().data_ptr(), a.nbytes()), 0)
          << name << ": " << plain[i].first << " differs with profiling on";
    }
  }
}

}  // namespace
}  // namespace freight
