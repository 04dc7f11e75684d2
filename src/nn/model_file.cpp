// Model files: JSON → modules. Each layer's input size comes from the running shape, so a file
// only states what a layer produces ({"type": "linear", "out": 512}); the builder checks every
// layer against the shape reaching it and names the layer (its index and type) when it does not
// fit.
#include "freight/nn/model_file.h"

#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "freight/error.h"
#include "freight/nn/container.h"
#include "freight/nn/layers.h"
#include "freight/nn/lstm.h"

namespace freight::nn {

namespace {
namespace fs = std::filesystem;
using nlohmann::json;

std::vector<fs::path> model_dirs() {
  std::vector<fs::path> dirs;
  if (const char* env = std::getenv("FREIGHT_MODELS_DIR")) dirs.emplace_back(env);
#ifdef FREIGHT_SOURCE_DIR
  dirs.emplace_back(fs::path(FREIGHT_SOURCE_DIR) / "models");
#endif
  dirs.emplace_back("models");
  return dirs;
}

struct Ctx {
  std::string file;
  std::string where;  // "layer 3 (conv2d)"
  Error error(const std::string& what) const {
    return Error(fmt::format("model file '{}': {}: {}", file, where, what));
  }
};

int64_t get_int(const json& spec, const char* key, const Ctx& ctx) {
  if (!spec.contains(key)) throw ctx.error(fmt::format("missing \"{}\"", key));
  if (!spec[key].is_number_integer() || spec[key].get<int64_t>() < 0)
    throw ctx.error(
        fmt::format("\"{}\" must be a non-negative integer, got {}", key, spec[key].dump()));
  return spec[key].get<int64_t>();
}

int64_t get_int_or(const json& spec, const char* key, int64_t fallback, const Ctx& ctx) {
  return spec.contains(key) ? get_int(spec, key, ctx) : fallback;
}

Size2 get_pair(const json& spec, const char* key, Size2 fallback, const Ctx& ctx) {
  if (!spec.contains(key)) return fallback;
  const json& v = spec[key];
  if (v.is_number_integer()) return Size2(v.get<int64_t>());
  if (v.is_array() && v.size() == 2 && v[0].is_number_integer() && v[1].is_number_integer())
    return Size2(v[0].get<int64_t>(), v[1].get<int64_t>());
  throw ctx.error(fmt::format("\"{}\" must be an integer or [h, w], got {}", key, v.dump()));
}

// Inlines {"type": "repeat", "times": n, "layers": [...]} into n copies.
std::vector<json> expand(const json& layers, const Ctx& ctx) {
  if (!layers.is_array()) throw ctx.error("\"layers\" must be a list");
  std::vector<json> out;
  for (const json& spec : layers) {
    if (!spec.is_object() || !spec.contains("type") || !spec["type"].is_string())
      throw ctx.error(fmt::format("each layer needs a \"type\", got {}", spec.dump()));
    if (spec["type"] == "repeat") {
      int64_t times = get_int(spec, "times", ctx);
      if (!spec.contains("layers")) throw ctx.error("repeat needs \"layers\"");
      std::vector<json> body = expand(spec["layers"], ctx);
      for (int64_t i = 0; i < times; ++i) out.insert(out.end(), body.begin(), body.end());
    } else {
      out.push_back(spec);
    }
  }
  return out;
}

ModulePtr build_layers(const json& layers, Shape& shape, const std::string& prefix, Ctx ctx);

// Builds one layer for input `shape` (with the batch dimension) and advances `shape`.
ModulePtr build_layer(const json& spec, Shape& shape, const std::string& prefix, Ctx ctx) {
  std::string type = spec["type"].get<std::string>();
  auto need_rank = [&](size_t r, const char* layout) {
    if (shape.size() != r)
      throw ctx.error(
          fmt::format("{} needs input {} but receives {}", type, layout, shape_str(shape)));
  };
  ModulePtr m;
  if (type == "linear") {
    if (shape.size() < 2)
      throw ctx.error(
          fmt::format("linear needs [N, ..., features], receives {}", shape_str(shape)));
    m = std::make_shared<Linear>(shape.back(), get_int(spec, "out", ctx), spec.value("bias", true));
  } else if (type == "conv2d") {
    need_rank(4, "[N, C, H, W]");
    m = std::make_shared<Conv2d>(
        shape[1], get_int(spec, "out", ctx), get_pair(spec, "kernel", Size2(0), ctx),
        get_pair(spec, "stride", Size2(1), ctx), get_pair(spec, "padding", Size2(0), ctx),
        get_pair(spec, "dilation", Size2(1), ctx), spec.value("bias", true));
  } else if (type == "maxpool2d" || type == "avgpool2d") {
    need_rank(4, "[N, C, H, W]");
    Size2 k = get_pair(spec, "kernel", Size2(0), ctx);
    Size2 s = get_pair(spec, "stride", k, ctx);
    Size2 p = get_pair(spec, "padding", Size2(0), ctx);
    if (type == "maxpool2d")
      m = std::make_shared<MaxPool2d>(k, s, p);
    else
      m = std::make_shared<AvgPool2d>(k, s, p);
  } else if (type == "batchnorm" || type == "batchnorm1d" || type == "batchnorm2d") {
    double eps = spec.value("eps", 1e-5), momentum = spec.value("momentum", 0.1);
    if (shape.size() < 2)
      throw ctx.error(fmt::format("batchnorm needs [N, C, ...], receives {}", shape_str(shape)));
    if (type == "batchnorm2d" || (type == "batchnorm" && shape.size() == 4))
      m = std::make_shared<BatchNorm2d>(shape[1], eps, momentum);
    else
      m = std::make_shared<BatchNorm1d>(shape[1], eps, momentum);
  } else if (type == "dropout") {
    m = std::make_shared<Dropout>(spec.value("p", 0.5));
  } else if (type == "relu") {
    m = std::make_shared<ReLU>();
  } else if (type == "sigmoid") {
    m = std::make_shared<Sigmoid>();
  } else if (type == "tanh") {
    m = std::make_shared<Tanh>();
  } else if (type == "gelu") {
    m = std::make_shared<GELU>();
  } else if (type == "flatten") {
    m = std::make_shared<Flatten>(get_int_or(spec, "start", 1, ctx),
                                  spec.contains("end") ? spec["end"].get<int64_t>() : -1);
  } else if (type == "reshape") {
    if (!spec.contains("shape") || !spec["shape"].is_array())
      throw ctx.error("reshape needs \"shape\": [..] (per sample)");
    m = std::make_shared<Reshape>(spec["shape"].get<Shape>());
  } else if (type == "embedding") {
    m = std::make_shared<Embedding>(get_int(spec, "num", ctx), get_int(spec, "dim", ctx));
  } else if (type == "lstm") {
    need_rank(3, "[N, T, features]");
    m = std::make_shared<LSTM>(shape[2], get_int(spec, "hidden", ctx),
                               get_int_or(spec, "layers", 1, ctx));
  } else if (type == "last_step") {
    m = std::make_shared<LastStep>();
  } else if (type == "residual") {
    if (!spec.contains("body")) throw ctx.error("residual needs \"body\"");
    Shape body_shape = shape;
    ModulePtr body = build_layers(spec["body"], body_shape, prefix + "body.", ctx);
    ModulePtr shortcut;
    Shape short_shape = shape;
    if (spec.contains("shortcut") && !spec["shortcut"].empty())
      shortcut = build_layers(spec["shortcut"], short_shape, prefix + "shortcut.", ctx);
    if (body_shape != short_shape)
      throw ctx.error(fmt::format("residual body produces {} but the shortcut produces {}",
                                  shape_str(body_shape), shape_str(short_shape)));
    shape = body_shape;
    return std::make_shared<Residual>(body, shortcut);
  } else if (type == "sequential") {
    return build_layers(spec.value("layers", json::array()), shape, prefix, ctx);
  } else {
    throw ctx.error(fmt::format(
        "unknown layer type \"{}\" (known: linear, conv2d, maxpool2d, avgpool2d, batchnorm, "
        "dropout, relu, sigmoid, tanh, gelu, flatten, reshape, embedding, lstm, last_step, "
        "residual, sequential, repeat)",
        type));
  }
  try {
    shape = m->output_shape(shape);
  } catch (const Error& e) {
    throw ctx.error(e.what());
  }
  return m;
}

ModulePtr build_layers(const json& layers, Shape& shape, const std::string& prefix, Ctx ctx) {
  auto seq = std::make_shared<Sequential>();
  std::vector<json> flat = expand(layers, ctx);
  for (size_t i = 0; i < flat.size(); ++i) {
    Ctx here = ctx;
    here.where = fmt::format("layer {}{} ({})", prefix, i, flat[i]["type"].get<std::string>());
    seq->push_back(build_layer(flat[i], shape, fmt::format("{}{}.", prefix, i), here));
  }
  return seq;
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
    for (const fs::path& dir : model_dirs()) {
      fs::path p = dir / (name_or_path + ".json");
      if (fs::exists(p)) {
        path = p;
        break;
      }
    }
    if (path.empty()) {
      std::string known;
      for (const std::string& n : zoo_models()) known += (known.empty() ? "" : ", ") + n;
      throw Error(
          fmt::format("--model: no model named '{}' (the zoo has: {}; or give a path to "
                      "a .json model file)",
                      name_or_path, known));
    }
  }
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return parse_model_spec(text, path.string());
}

ModelSpec parse_model_spec(const std::string& text, const std::string& origin) {
  std::filesystem::path path(origin);
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw Error(fmt::format("model file '{}' is not valid JSON: {}", origin, e.what()));
  }
  Ctx ctx{origin, "top level"};
  if (!j.is_object()) throw ctx.error("expected a JSON object");
  ModelSpec s;
  s.path = origin;
  s.name = j.value("name", path.stem().string());
  s.description = j.value("description", "");
  if (!j.contains("input") || !j["input"].is_object() || !j["input"].contains("shape"))
    throw ctx.error("missing \"input\": {\"shape\": [...]}");
  s.input_shape = j["input"]["shape"].get<Shape>();
  s.input_dtype = parse_dtype(j["input"].value("dtype", "float32"));
  s.vocab = j["input"].value("vocab", int64_t(0));
  s.classes = get_int(j, "classes", ctx);
  s.task = j.value("task", "classify");
  if (s.task != "classify" && s.task != "language_model")
    throw ctx.error(fmt::format("task \"{}\" is not classify or language_model", s.task));
  if (!j.contains("layers")) throw ctx.error("missing \"layers\"");
  s.layers_json = j["layers"].dump();
  if (j.contains("train") && j["train"].is_object())
    for (auto it = j["train"].begin(); it != j["train"].end(); ++it)
      s.train_defaults[it.key()] = it->is_string() ? it->get<std::string>() : it->dump();
  return s;
}

std::vector<std::string> zoo_models() {
  std::vector<std::string> names;
  for (const fs::path& dir : model_dirs()) {
    if (!fs::is_directory(dir)) continue;
    for (const auto& e : fs::directory_iterator(dir))
      if (e.path().extension() == ".json") names.push_back(e.path().stem().string());
    if (!names.empty()) break;
  }
  std::sort(names.begin(), names.end());
  return names;
}

ModulePtr build_model(const ModelSpec& spec) {
  Shape shape{1};
  shape.insert(shape.end(), spec.input_shape.begin(), spec.input_shape.end());
  Ctx ctx{spec.path, "layers"};
  ModulePtr m = build_layers(json::parse(spec.layers_json), shape, "", ctx);
  int64_t expected = spec.classes;
  if (shape.back() != expected)
    throw ctx.error(
        fmt::format("the network produces {} per sample but the model declares {} "
                    "classes",
                    shape_str(Shape(shape.begin() + 1, shape.end())), expected));
  return m;
}

}  // namespace freight::nn
