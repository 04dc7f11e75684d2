// Model files: JSON → modules. Each layer's input size comes from the running shape, so a file
// only states what a layer produces ({"type": "linear", "out": 512}); the builder checks every
// layer against the shape reaching it and names the layer (its index and type) when it does not
// fit.
#include "freight/nn/model_file.h"

#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "freight/error.h"
#include "freight/nn/container.h"
#include "freight/nn/layers.h"
#include "freight/nn/lstm.h"
#include "io/json_limits.h"
#include "io/search_dirs.h"
#include "nn/model_fields.h"

namespace freight::nn {

namespace {
namespace fs = std::filesystem;
using nlohmann::json;
using namespace fields;  // NOLINT: the builder reads every field through them

// Limits on what a model file may ask for, checked before anything is allocated (a first pass
// sizes the network from the shapes alone; see Builder). Each is far beyond any real network
// (VGG-16: 39 layers, 138M parameters, 31 GFLOPs per 224x224 image) and far below what would hang
// or exhaust a machine. docs/model-format.md lists them.
constexpr int64_t kMaxLayers = 100'000;            // modules after expanding repeats
constexpr int64_t kMaxParameters = 1'000'000'000;  // 4 GB of float32 weights
constexpr int64_t kMaxActivation = 1'000'000'000;  // values per sample in one layer's output
constexpr double kMaxFlops = 1e15;                 // forward FLOPs per sample
constexpr uint64_t kMaxModelFileBytes = uint64_t(64) << 20;

// The activation whose model-file type is `type` (the op's name: "relu"), or nullptr.
const UnaryOpInfo* activation_by_type(const std::string& type) {
  for (const UnaryOpInfo& info : kUnaryOps)
    if (info.layer && type == info.name) return &info;
  return nullptr;
}

// "relu, sigmoid, ...": the activation types, for the list of known types in an error.
std::string activation_types() {
  std::string list;
  for (const UnaryOpInfo& info : kUnaryOps)
    if (info.layer) list += (list.empty() ? "" : ", ") + std::string(info.name);
  return list;
}

// The element count of `s`, or INT64_MAX when it overflows (an output beyond any limit).
int64_t numel_capped(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n = mul(n, d);
  return n;
}

// The fields of each layer type besides "type" (docs/model-format.md's table): any other is a
// misspelling or a field from another type, and an error. Types not listed here are refused by
// the builder as unknown.
struct LayerFields {
  const char* type;
  std::vector<const char*> fields;
};
const LayerFields kLayerFields[] = {
    {"linear", {"out", "bias"}},
    {"conv2d", {"out", "kernel", "stride", "padding", "dilation", "bias"}},
    {"maxpool2d", {"kernel", "stride", "padding"}},
    {"avgpool2d", {"kernel", "stride", "padding"}},
    {"batchnorm", {"eps", "momentum"}},
    {"batchnorm1d", {"eps", "momentum"}},
    {"batchnorm2d", {"eps", "momentum"}},
    {"dropout", {"p"}},
    {"flatten", {"start", "end"}},
    {"reshape", {"shape"}},
    {"embedding", {"num", "dim"}},
    {"lstm", {"hidden", "layers"}},
    {"residual", {"body", "shortcut"}},
    {"sequential", {"layers"}},
    {"repeat", {"times", "layers"}},
    {"last_step", {}},
};

void check_layer_fields(const json& spec, const std::string& type, const Ctx& ctx) {
  for (const LayerFields& l : kLayerFields)
    if (type == l.type) return check_known_fields(spec, l.fields, type, ctx, true);
  if (activation_by_type(type)) check_known_fields(spec, {}, type, ctx, true);  // no fields
}

// Turns a "layers" list into modules, in two passes over the same code. The first (dry) pass
// allocates no weights: layers with parameters are sized by formula (their parameter count and
// output shape follow from the shape reaching them), those without are built for real (they
// cost nothing) so their own checks and output_shape apply. It counts layers, parameters,
// per-sample activations and FLOPs against the limits above and stops at the first layer that
// goes beyond one. Only then does the second pass build the network.
class Builder {
 public:
  // `tokens`: the model's input holds int64 token ids (then `vocab` is their range, 0 unknown).
  Builder(bool dry, bool tokens, int64_t vocab) : dry_(dry), tokens_(tokens), vocab_(vocab) {}

  ModulePtr layers(const json& list, Shape& shape, const std::string& prefix, const Ctx& ctx,
                   const char* key) {
    std::vector<const json*> flat;
    expand(list, prefix, ctx, key, flat);
    auto seq = dry_ ? nullptr : std::make_shared<Sequential>();
    for (size_t i = 0; i < flat.size(); ++i) {
      Ctx here = ctx;
      here.where = fmt::format("layer {}{} ({})", prefix, i, (*flat[i])["type"].get<std::string>());
      ModulePtr m = layer(*flat[i], shape, fmt::format("{}{}.", prefix, i), here);
      if (seq) seq->push_back(m);
    }
    return seq;
  }

 private:
  // Inlines {"type": "repeat", "times": n, "layers": [...]} as n runs of pointers to its body
  // (no copies), checking the count before the expansion is materialised.
  void expand(const json& list, const std::string& prefix, const Ctx& ctx, const char* key,
              std::vector<const json*>& out) {
    if (!list.is_array())
      throw ctx.error(fmt::format("\"{}\" must be a list of layers, got {}", key, show(list)));
    for (const json& spec : list) {
      const json* type = field(spec, "type");
      if (!type || !type->is_string())
        throw ctx.error(fmt::format("each layer needs a \"type\", got {}", show(spec)));
      if (*type != "repeat") {
        out.push_back(&spec);
        continue;
      }
      Ctx here = ctx;
      here.where = fmt::format("layer {}{} (repeat)", prefix, out.size());
      check_layer_fields(spec, "repeat", here);
      int64_t times = get_int(spec, "times", here, 0);
      const json* body_list = field(spec, "layers");
      if (!body_list) throw here.error("repeat needs \"layers\"");
      std::vector<const json*> body;
      expand(*body_list, prefix, here, "layers", body);
      int64_t total = add(int64_t(out.size()), mul(times, int64_t(body.size())));
      if (total > kMaxLayers)
        throw here.error(
            fmt::format("{} times {} layers would make {} layers in this list, "
                        "beyond the limit of {} layers",
                        times, body.size(),
                        total == INT64_MAX ? "more than 2^63" : std::to_string(total), kMaxLayers));
      for (int64_t t = 0; t < times; ++t) out.insert(out.end(), body.begin(), body.end());
    }
  }

  // Builds (or, dry, sizes) one layer for input `shape` (with the batch dimension 1) and
  // advances `shape`.
  ModulePtr layer(const json& spec, Shape& shape, const std::string& prefix, const Ctx& ctx) {
    if (dry_ && ++layers_ > kMaxLayers)
      throw ctx.error(fmt::format("the model has more than {} layers, the limit", kMaxLayers));
    // Only the first layer receives the model's input (a container passes it to its own first
    // layer): declared token ids go to an embedding, and an embedding after another layer would
    // receive that layer's float output.
    const std::string type = spec["type"].get<std::string>();
    const bool container = type == "sequential" || type == "residual";
    if (at_input_ && tokens_ && !container && type != "embedding")
      throw ctx.error(
          fmt::format("the model's input holds int64 token ids (\"dtype\": \"int64\"), "
                      "which only an embedding reads, not {}",
                      type));
    if (at_input_ && !tokens_ && type == "embedding")
      throw ctx.error(
          "an embedding reads int64 token ids, but the model's input is floating point: declare "
          "\"dtype\": \"int64\" in \"input\" (with \"vocab\") for a model of tokens");
    if (!at_input_ && type == "embedding")
      throw ctx.error(
          "an embedding reads int64 token ids, so it must be the model's first layer; here it "
          "would receive the float output of the layer before it");
    try {
      ModulePtr m = layer_unchecked(spec, shape, prefix, ctx);
      if (!container) at_input_ = false;
      return m;
    } catch (const SpecError&) {
      throw;
    } catch (const Error& e) {
      // A layer's constructor or output_shape: they name the layer's class, not the file.
      throw ctx.error(e.what());
    } catch (const json::exception& e) {
      // Every field is read through the typed getters above; this is the backstop.
      throw ctx.error(fmt::format("unexpected JSON in this layer: {}", e.what()));
    }
  }

  ModulePtr layer_unchecked(const json& spec, Shape& shape, const std::string& prefix,
                            const Ctx& ctx) {
    const std::string type = spec["type"].get<std::string>();
    check_layer_fields(spec, type, ctx);
    auto need_rank = [&](size_t r, const char* layout) {
      if (shape.size() != r)
        throw ctx.error(
            fmt::format("{} needs input {} but receives {}", type, layout, shape_str(shape)));
    };
    const Shape in = shape;
    // Layers with parameters: sized by formula in the dry pass, built in the second.
    if (type == "linear") {
      if (shape.size() < 2)
        throw ctx.error(
            fmt::format("linear needs [N, ..., features], receives {}", shape_str(shape)));
      int64_t fin = shape.back(), fout = get_int(spec, "out", ctx, 1);
      bool bias = get_bool_or(spec, "bias", true, ctx);
      Shape out = in;
      out.back() = fout;
      if (dry_) {
        int64_t rows = shape_numel(in) / fin;
        account(ctx, add(mul(fout, fin), bias ? fout : 0), out,
                2.0 * double(rows) * double(fin) * double(fout));
        shape = out;
        return nullptr;
      }
      return finish(std::make_shared<Linear>(fin, fout, bias), shape);
    }
    if (type == "conv2d") {
      need_rank(4, "[N, C, H, W]");
      const Size2 one(1), zero(0);
      int64_t cin = shape[1], cout = get_int(spec, "out", ctx, 1);
      Size2 k = get_pair(spec, "kernel", ctx, 1, nullptr);
      Size2 st = get_pair(spec, "stride", ctx, 1, &one);
      Size2 pad = get_pair(spec, "padding", ctx, 0, &zero);
      Size2 dil = get_pair(spec, "dilation", ctx, 1, &one);
      bool bias = get_bool_or(spec, "bias", true, ctx);
      if (dry_) {
        // ⌊(n + 2·pad − dilation·(k − 1) − 1) / stride⌋ + 1; every term is below 2^62.
        int64_t span_h = dil.h * (k.h - 1) + 1, span_w = dil.w * (k.w - 1) + 1;
        if (shape[2] + 2 * pad.h < span_h || shape[3] + 2 * pad.w < span_w)
          throw ctx.error(
              fmt::format("input {} is smaller than the kernel (spanning {}x{} with "
                          "its dilation, padding {}x{})",
                          shape_str(shape), span_h, span_w, pad.h, pad.w));
        Shape out{shape[0], cout, (shape[2] + 2 * pad.h - span_h) / st.h + 1,
                  (shape[3] + 2 * pad.w - span_w) / st.w + 1};
        int64_t weights = mul(mul(cout, cin), mul(k.h, k.w));
        account(ctx, add(weights, bias ? cout : 0), out,
                2.0 * double(cin) * double(k.h) * double(k.w) * double(numel_capped(out)));
        shape = out;
        return nullptr;
      }
      return finish(std::make_shared<Conv2d>(cin, cout, k, st, pad, dil, bias), shape);
    }
    if (type == "batchnorm" || type == "batchnorm1d" || type == "batchnorm2d") {
      double eps = get_number_or(spec, "eps", 1e-5, ctx);
      double momentum = get_number_or(spec, "momentum", 0.1, ctx);
      if (eps <= 0) throw ctx.error(fmt::format("\"eps\" must be positive, got {}", eps));
      if (momentum < 0 || momentum > 1)
        throw ctx.error(fmt::format("\"momentum\" must lie in [0, 1], got {}", momentum));
      if (shape.size() < 2)
        throw ctx.error(fmt::format("batchnorm needs [N, C, ...], receives {}", shape_str(shape)));
      bool two_d = type == "batchnorm2d" || (type == "batchnorm" && shape.size() == 4);
      if (dry_) {
        account(ctx, mul(2, shape[1]), in, 2.0 * double(shape_numel(in)));
        return nullptr;
      }
      if (two_d) return finish(std::make_shared<BatchNorm2d>(shape[1], eps, momentum), shape);
      return finish(std::make_shared<BatchNorm1d>(shape[1], eps, momentum), shape);
    }
    if (type == "embedding") {
      int64_t num = get_int(spec, "num", ctx, 1), dim = get_int(spec, "dim", ctx, 1);
      if (tokens_ && vocab_ > num)
        throw ctx.error(
            fmt::format("\"input\" says token ids go up to {} (\"vocab\": {}), but the "
                        "table has {} rows (\"num\"): ids from {} on would be out of "
                        "range",
                        vocab_ - 1, vocab_, num, num));
      if (dry_) {
        Shape out = in;
        out.push_back(dim);
        account(ctx, mul(num, dim), out, 0.0);
        shape = out;
        return nullptr;
      }
      return finish(std::make_shared<Embedding>(num, dim), shape);
    }
    if (type == "lstm") {
      need_rank(3, "[N, T, features]");
      int64_t hidden = get_int(spec, "hidden", ctx, 1);
      int64_t stack = get_int_or(spec, "layers", 1, ctx, 1);
      if (dry_) {
        // Per layer: weight_ih [4H, in], weight_hh [4H, H], two biases [4H].
        int64_t params = 0;
        double flops = 0, bt = double(shape[0]) * double(shape[1]), h = double(hidden);
        for (int64_t l = 0; l < stack && params < kMaxParameters; ++l) {
          int64_t fin = l == 0 ? shape[2] : hidden;
          params = add(params, add(mul(mul(4, hidden), add(fin, hidden)), mul(8, hidden)));
          flops += bt * (8.0 * h * (double(fin) + h) + 10.0 * h);
        }
        Shape out{shape[0], shape[1], hidden};
        account(ctx, params, out, flops);
        shape = out;
        return nullptr;
      }
      return finish(std::make_shared<LSTM>(shape[2], hidden, stack), shape);
    }
    // Containers: their layers are counted one by one.
    if (type == "residual") {
      const json* body_list = field(spec, "body");
      if (!body_list) throw ctx.error("residual needs \"body\"");
      Shape body_shape = shape, short_shape = shape;
      ModulePtr body = layers(*body_list, body_shape, prefix + "body.", ctx, "body");
      ModulePtr shortcut;
      const json* short_list = field(spec, "shortcut");
      if (short_list && !short_list->empty())
        shortcut = layers(*short_list, short_shape, prefix + "shortcut.", ctx, "shortcut");
      if (body_shape != short_shape)
        throw ctx.error(fmt::format("residual body produces {} but the shortcut produces {}",
                                    shape_str(body_shape), shape_str(short_shape)));
      shape = body_shape;
      if (dry_) {
        account(ctx, 0, shape, double(shape_numel(shape)));  // the addition
        return nullptr;
      }
      return std::make_shared<Residual>(body, shortcut);
    }
    if (type == "sequential") {
      const json* list = field(spec, "layers");
      return layers(list ? *list : json::array(), shape, prefix, ctx, "layers");
    }
    // Layers without parameters: built in both passes.
    ModulePtr m;
    if (type == "maxpool2d" || type == "avgpool2d") {
      need_rank(4, "[N, C, H, W]");
      const Size2 zero(0);
      Size2 k = get_pair(spec, "kernel", ctx, 1, nullptr);
      Size2 st = get_pair(spec, "stride", ctx, 1, &k);
      Size2 p = get_pair(spec, "padding", ctx, 0, &zero);
      if (type == "maxpool2d")
        m = std::make_shared<MaxPool2d>(k, st, p);
      else
        m = std::make_shared<AvgPool2d>(k, st, p);
    } else if (type == "dropout") {
      m = std::make_shared<Dropout>(get_number_or(spec, "p", 0.5, ctx));
    } else if (const UnaryOpInfo* act = activation_by_type(type)) {
      m = make_activation(act->op);
    } else if (type == "flatten") {
      m = std::make_shared<Flatten>(get_int_or(spec, "start", 1, ctx, -kMaxFieldValue),
                                    get_int_or(spec, "end", -1, ctx, -kMaxFieldValue));
    } else if (type == "reshape") {
      m = std::make_shared<Reshape>(get_shape(spec, "shape", ctx, true));
    } else if (type == "last_step") {
      m = std::make_shared<LastStep>();
    } else {
      throw ctx.error(fmt::format(
          "unknown layer type \"{}\" (known: linear, conv2d, maxpool2d, avgpool2d, batchnorm, "
          "dropout, {}, flatten, reshape, embedding, lstm, last_step, residual, sequential, "
          "repeat)",
          type, activation_types()));
    }
    finish(m, shape);
    if (dry_) account(ctx, 0, shape, m->flops(in));
    return m;
  }

  // Advances `shape` through a built layer (its output_shape checks the input).
  static ModulePtr finish(ModulePtr m, Shape& shape) {
    shape = m->output_shape(shape);
    return m;
  }

  // Adds one layer's parameters, output (values per sample; the batch is 1 here) and FLOPs to
  // the model's totals, naming the layer when one goes beyond its limit.
  void account(const Ctx& ctx, int64_t params, const Shape& out, double flops) {
    params_ = add(params_, params);
    if (params_ > kMaxParameters)
      throw ctx.error(fmt::format(
          "its {} parameters bring the model to {}, beyond the limit of "
          "{} parameters",
          params == INT64_MAX ? "more than 2^63" : std::to_string(params),
          params_ == INT64_MAX ? "more than 2^63" : std::to_string(params_), kMaxParameters));
    int64_t values = numel_capped(out);
    if (values > kMaxActivation)
      throw ctx.error(fmt::format(
          "its output {} holds {} values per sample, beyond the limit of "
          "{}",
          shape_str(out), values == INT64_MAX ? "more than 2^63" : std::to_string(values),
          kMaxActivation));
    flops_ += flops;
    if (!(flops_ <= kMaxFlops))
      throw ctx.error(
          fmt::format("it brings the forward pass to {:.3g} FLOPs per sample, beyond "
                      "the limit of {:.0e}",
                      flops_, kMaxFlops));
  }

  bool dry_;
  bool tokens_;           // the model's input holds int64 token ids
  int64_t vocab_;         // their range ("vocab"; 0: not given)
  bool at_input_ = true;  // the next layer receives the model's input

 public:
  ModelSize size() const { return {layers_, params_, flops_}; }

 private:
  int64_t layers_ = 0, params_ = 0;
  double flops_ = 0;
};

// Parses JSON text from a file after bounding its nesting (nlohmann's serializer and the
// builder recurse once per level).
json parse_json(const std::string& text, const std::string& origin) {
  FREIGHT_CHECK(io::json_nesting_depth(text) <= io::kMaxJsonDepth,
                fmt::format("model file '{}' is nested more than {} levels deep (arrays and "
                            "objects); real model files need fewer than 10",
                            origin, io::kMaxJsonDepth));
  json j;
  std::string duplicate;
  try {
    j = io::parse_json_unique_keys(text, duplicate);
  } catch (const json::exception& e) {
    throw Error(fmt::format("model file '{}' is not valid JSON: {}", origin, e.what()));
  }
  FREIGHT_CHECK(duplicate.empty(),
                fmt::format("model file '{}' names the key {} twice; keep one (JSON parsers "
                            "differ on which one counts)",
                            origin, duplicate));
  return j;
}
}  // namespace

ModelSpec load_model_spec(const std::string& name_or_path) {
  fs::path path;
  bool looks_like_path =
      name_or_path.find('/') != std::string::npos || name_or_path.ends_with(".json");
  if (looks_like_path) {
    path = name_or_path;
    FREIGHT_CHECK(fs::exists(path),
                  fmt::format("--model: model file '{}' does not exist", name_or_path));
  } else {
    std::vector<io::SearchDir> dirs = io::model_search_dirs();
    std::string file = name_or_path + ".json";
    if (auto found = io::find_in(dirs, file)) {
      path = *found;
    } else {
      std::string known;
      for (const std::string& n : zoo_models()) known += (known.empty() ? "" : ", ") + n;
      throw Error(fmt::format(
          "--model: no model named '{}' ({}; or give a path to a .json model file). Looked for "
          "{} in, in order:\n{}Set FREIGHT_MODEL_PATH to the directory that holds it (a "
          "colon-separated list of directories)",
          name_or_path, known.empty() ? "no model zoo was found" : "the zoo has: " + known, file,
          io::describe_search(dirs, file)));
    }
  }
  // Reading a directory through a filebuf fails deep inside the stream ("basic_filebuf::
  // underflow"); special files have no size to check. Both are refused by name first.
  std::error_code ec;
  FREIGHT_CHECK(!fs::is_directory(path, ec),
                fmt::format("--model: '{}' is a directory; give a model file (.json) or the "
                            "name of a model in the zoo",
                            path.string()));
  FREIGHT_CHECK(fs::is_regular_file(path, ec),
                fmt::format("--model: '{}' is not a regular file", path.string()));
  uint64_t size = fs::file_size(path, ec);
  FREIGHT_CHECK(!ec && size <= kMaxModelFileBytes,
                fmt::format("--model: model file '{}' is {} bytes, more than the {} MiB a model "
                            "file may have",
                            path.string(), size, kMaxModelFileBytes >> 20));
  std::ifstream in(path, std::ios::binary);
  std::string text(size, '\0');
  in.read(text.data(), std::streamsize(size));
  FREIGHT_CHECK(
      in.gcount() == std::streamsize(size),
      fmt::format("--model: cannot read model file '{}': {}", path.string(), std::strerror(errno)));
  return parse_model_spec(text, path.string());
}

ModelSpec parse_model_spec(const std::string& text, const std::string& origin) {
  std::filesystem::path path(origin);
  FREIGHT_CHECK(text.size() <= kMaxModelFileBytes,
                fmt::format("model file '{}' is {} bytes, more than the {} MiB a model file may "
                            "have",
                            origin, text.size(), kMaxModelFileBytes >> 20));
  json j = parse_json(text, origin);
  Ctx ctx{origin, "top level"};
  if (!j.is_object()) throw ctx.error("expected a JSON object");
  check_known_fields(j, {"name", "description", "input", "classes", "task", "layers", "train"},
                     "a model file", ctx);
  ModelSpec s;
  s.path = origin;
  s.name = get_string_or(j, "name", path.stem().string(), ctx);
  s.description = get_string_or(j, "description", "", ctx);
  const json* input = field(j, "input");
  if (!input || !input->is_object() || !field(*input, "shape"))
    throw ctx.error("missing \"input\": {\"shape\": [...]}");
  Ctx in_ctx{origin, "input"};
  check_known_fields(*input, {"shape", "dtype", "vocab"}, "\"input\"", in_ctx);
  s.input_shape = get_shape(*input, "shape", in_ctx, false);
  if (numel_capped(s.input_shape) > kMaxActivation)
    throw in_ctx.error(fmt::format("\"shape\" {} holds more than {} values per sample",
                                   shape_str(s.input_shape), kMaxActivation));
  std::string dtype = get_string_or(*input, "dtype", "float32", in_ctx);
  try {
    s.input_dtype = parse_dtype(dtype);
  } catch (const Error& e) {
    throw in_ctx.error(fmt::format("\"dtype\": {}", e.what()));
  }
  s.vocab = get_int_or(*input, "vocab", 0, in_ctx, 0);
  s.classes = get_int(j, "classes", ctx, 1);
  s.task = get_string_or(j, "task", "classify", ctx);
  if (s.task != "classify" && s.task != "language_model")
    throw ctx.error(fmt::format("task \"{}\" is not classify or language_model", s.task));
  if (s.task == "language_model" && s.input_dtype != DType::I64)
    throw ctx.error(
        fmt::format("task \"language_model\" predicts the next token of int64 token "
                    "ids, but the input is {}: declare \"dtype\": \"int64\" in "
                    "\"input\", or use task \"classify\"",
                    dtype));
  const json* layers = field(j, "layers");
  if (!layers) throw ctx.error("missing \"layers\"");
  if (!layers->is_array())
    throw ctx.error(fmt::format("\"layers\" must be a list of layers, got {}", show(*layers)));
  s.layers_json = layers->dump();
  if (const json* train = field(j, "train")) {
    if (!train->is_object())
      throw ctx.error(fmt::format("\"train\" must be an object of settings, got {}", show(*train)));
    // The settings freight train reads from a model file (training/settings.cpp).
    check_known_fields(*train,
                       {"dataset", "epochs", "batch_size", "optimizer", "lr", "momentum",
                        "weight_decay", "schedule", "step_size", "gamma"},
                       "\"train\"", Ctx{origin, "train"});
    for (auto it = train->begin(); it != train->end(); ++it)
      s.train_defaults[it.key()] = it->is_string() ? it->get<std::string>() : it->dump();
  }
  return s;
}

std::string model_spec_json(const ModelSpec& spec) {
  json j;
  j["name"] = spec.name;
  j["description"] = spec.description;
  j["input"] = {{"shape", spec.input_shape}, {"dtype", dtype_name(spec.input_dtype)}};
  if (spec.vocab) j["input"]["vocab"] = spec.vocab;
  j["classes"] = spec.classes;
  j["task"] = spec.task;
  j["layers"] = json::parse(spec.layers_json);
  j["train"] = spec.train_defaults;
  return j.dump();
}

std::vector<std::string> zoo_models() {
  std::vector<std::string> names;
  for (const io::SearchDir& d : io::model_search_dirs()) {
    std::error_code ec;
    if (!fs::is_directory(d.dir, ec)) continue;
    for (const auto& e : fs::directory_iterator(d.dir, ec))
      if (e.path().extension() == ".json") names.push_back(e.path().stem().string());
    if (!names.empty()) break;
  }
  std::sort(names.begin(), names.end());
  return names;
}

namespace {
// Runs `f(builder, shape, layers, ctx)` for one pass over the spec's layers, then checks that the
// network ends in the declared number of classes.
template <typename F>
auto one_pass(const ModelSpec& spec, bool dry, F&& f) {
  Shape shape{1};
  shape.insert(shape.end(), spec.input_shape.begin(), spec.input_shape.end());
  Ctx ctx{spec.path, "layers"};
  json layers = parse_json(spec.layers_json, spec.path);
  Builder builder(dry, spec.input_dtype == DType::I64, spec.vocab);
  auto result = f(builder, builder.layers(layers, shape, "", ctx, "layers"));
  // The loss reads a classifier's output as [N, classes] and a language model's as one
  // prediction per input token, [N, T, classes].
  const Shape per_sample(shape.begin() + 1, shape.end());
  Shape want{spec.classes};
  if (spec.task == "language_model") {
    want = spec.input_shape;
    want.push_back(spec.classes);
  }
  if (per_sample != want)
    throw ctx.error(fmt::format(
        "the network produces {} per sample but the model declares {} classes, so it must "
        "produce {}{}",
        shape_str(per_sample), spec.classes, shape_str(want),
        spec.task == "language_model" ? " (one prediction per input token)"
                                      : " (a flatten before the last linear layer makes one)"));
  return result;
}
}  // namespace

ModelSize measure_model(const ModelSpec& spec) {
  return one_pass(spec, true, [](const Builder& b, const ModulePtr&) { return b.size(); });
}

ModulePtr build_model(const ModelSpec& spec) {
  // First the sizes against the limits, allocating no weights; then the network.
  measure_model(spec);
  return one_pass(spec, false, [](const Builder&, ModulePtr m) { return m; });
}

}  // namespace freight::nn
