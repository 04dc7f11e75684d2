// A model file's default training settings, overridden by command-line values (as freight train
// resolves them), for the commands that build a training step without training: explain, plan.
#pragma once
#include <fmt/format.h>

#include <cstdint>
#include <string>

#include "freight/error.h"
#include "freight/nn/model_file.h"

namespace freight::profile {

struct ModelSettings {
  int64_t batch_size = 64;
  std::string optimizer = "sgd";
  double lr = 0.01, momentum = 0, weight_decay = 0;
};

inline double model_setting(const nn::ModelSpec& spec, const std::string& key, double fallback) {
  auto it = spec.train_defaults.find(key);
  if (it == spec.train_defaults.end()) return fallback;
  try {
    return std::stod(it->second);
  } catch (...) {
    throw Error(
        fmt::format("model file '{}': train.{} = {} is not a number", spec.path, key, it->second));
  }
}

// batch_size < 0 and optimizer "" take the model's defaults.
inline ModelSettings model_settings(const nn::ModelSpec& spec, int64_t batch_size,
                                    const std::string& optimizer, double lr) {
  ModelSettings s;
  s.batch_size = batch_size >= 0 ? batch_size : int64_t(model_setting(spec, "batch_size", 64));
  auto it = spec.train_defaults.find("optimizer");
  s.optimizer = !optimizer.empty()                ? optimizer
                : it != spec.train_defaults.end() ? it->second
                                                  : std::string("sgd");
  s.lr = lr > 0 ? lr : model_setting(spec, "lr", 0.01);
  s.momentum = model_setting(spec, "momentum", 0.0);
  s.weight_decay = model_setting(spec, "weight_decay", 0.0);
  FREIGHT_CHECK(s.batch_size > 0,
                fmt::format("--batch-size must be positive (got {})", s.batch_size));
  return s;
}

}  // namespace freight::profile
