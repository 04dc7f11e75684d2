// freight summary: per layer, the output shape, parameters, forward FLOPs and activation memory
// of a model for a batch size, and the totals.
#include <fmt/format.h>

#include <functional>

#include "commands.h"
#include "flags.h"
#include "format.h"
#include "freight/nn/container.h"
#include "freight/nn/model_file.h"
#include "freight/nn/module.h"
#include "freight/random.h"

namespace freight::cli {

namespace {
std::string thousands(int64_t n) {
  std::string s = std::to_string(n), out;
  int k = 0;
  for (size_t i = s.size(); i-- > 0;) {
    out.insert(out.begin(), s[i]);
    if (++k % 3 == 0 && i > 0 && s[i - 1] != '-') out.insert(out.begin(), ',');
  }
  return out;
}

struct Row {
  std::string name, layer;
  Shape out;
  int64_t params;
  double flops, act_bytes;
  int depth;
};

// Walks the tree, feeding shapes through Sequential in order and through both branches of a
// Residual; leaves and containers each get a row (containers' rows hold their totals).
void walk(const nn::ModulePtr& m, const std::string& name, const Shape& in, int depth,
          int max_depth, std::vector<Row>& rows, bool is_root) {
  Shape out = m->output_shape(in);
  bool container = !m->named_children().empty();
  if (!is_root)
    rows.push_back({name, m->describe(), out, m->num_parameters(), m->flops(in),
                    container ? 0.0 : double(shape_numel(out)) * 4.0, depth});
  if (!container || depth >= max_depth) return;
  std::string prefix = name.empty() ? "" : name + ".";
  if (auto* seq = dynamic_cast<nn::Sequential*>(m.get())) {
    Shape s = in;
    for (const auto& [child_name, child] : seq->named_children()) {
      walk(child, prefix + child_name, s, depth + 1, max_depth, rows, false);
      s = child->output_shape(s);
    }
  } else {
    for (const auto& [child_name, child] : m->named_children())
      walk(child, prefix + child_name, in, depth + 1, max_depth, rows, false);
  }
}
}  // namespace

// --depth 1 lists the top-level layers; nothing nests anywhere near 2^20 deep.
constexpr IntRange kDepths{1, 1 << 20};

void add_summary(CLI::App& app) {
  struct Opts {
    std::string model = "fashion-cnn";
    int64_t batch_size = 1;
    int depth = 100;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "summary", "Layers of a model: output shapes, parameters, FLOPs, activation memory");
  cmd->add_option("--model,-m", o->model, "Zoo model name or model file")->capture_default_str();
  cmd->add_option("--batch-size,-b", o->batch_size, "Batch size for shapes, FLOPs and memory")
      ->capture_default_str()
      ->check(in_range(limits::batch_size));
  cmd->add_option("--depth", o->depth, "Nesting depth of the layer list")->check(in_range(kDepths));
  cmd->callback([o] {
    nn::ModelSpec spec = nn::load_model_spec(o->model);
    manual_seed(0);
    nn::ModulePtr model = nn::build_model(spec);
    Shape in{o->batch_size};
    in.insert(in.end(), spec.input_shape.begin(), spec.input_shape.end());
    std::vector<Row> rows, all;
    walk(model, "", in, 0, o->depth, rows, true);
    walk(model, "", in, 0, 1 << 20, all, true);  // every leaf, for the activation total

    fmt::print("{}: {}\n", spec.name, spec.description);
    fmt::print("input {} ({}), batch {}\n\n", shape_str(spec.input_shape),
               dtype_name(spec.input_dtype), o->batch_size);
    size_t wname = 5, wlayer = 5;
    for (const Row& r : rows) {
      wname = std::max(wname, r.name.size() + 2 * size_t(r.depth - 1));
      wlayer = std::min<size_t>(std::max(wlayer, r.layer.size()), 48);
    }
    fmt::print("{:<{}}  {:<{}}  {:<18} {:>13} {:>11} {:>11}\n", "layer", wname, "type", wlayer,
               "output", "params", "FLOPs", "activations");
    double act = 0;
    for (const Row& r : rows) {
      std::string layer = r.layer.size() > wlayer ? r.layer.substr(0, wlayer - 1) + "…" : r.layer;
      std::string shown = std::string(2 * size_t(r.depth - 1), ' ') + r.name;
      fmt::print("{:<{}}  {:<{}}  {:<18} {:>13} {:>11} {:>11}\n", shown, wname, layer, wlayer,
                 shape_str(r.out), thousands(r.params), format_count(r.flops),
                 r.act_bytes > 0 ? format_bytes(r.act_bytes) : "");
    }
    for (const Row& r : all) act += r.act_bytes;
    int64_t params = model->num_parameters();
    double flops = model->flops(in);
    fmt::print("\ntotal parameters   {} ({} as float32)\n", thousands(params),
               format_bytes(double(params) * 4));
    fmt::print(
        "forward FLOPs      {} per batch of {} ({} per sample); a training step is about "
        "3x that\n",
        format_count(flops), o->batch_size, format_count(flops / double(o->batch_size)));
    fmt::print("activations        {} for the batch (layer outputs kept for backward)\n",
               format_bytes(act));
  });
}

}  // namespace freight::cli
