// A model file's default training settings, overridden by command-line values (as freight train
// resolves them), for the commands that build a training step without training: explain, plan.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "freight/nn/model_file.h"
#include "freight/settings.h"

namespace freight::profile {

struct ModelSettings {
  int64_t batch_size = 64;
  std::string optimizer = "sgd";
  double lr = 0.01, momentum = 0, weight_decay = 0;
};

// Unset batch_size and optimizer "" take the model's defaults; set ones are checked, never
// replaced. The model's defaults are checked too (errors name the file and key).
inline ModelSettings model_settings(const nn::ModelSpec& spec, std::optional<int64_t> batch_size,
                                    const std::string& optimizer) {
  namespace L = limits;
  ModelSettings s;
  s.batch_size = batch_size ? check_setting("--batch-size", *batch_size, L::batch_size)
                            : train_default_int(spec, "batch_size", 64, L::batch_size);
  s.optimizer = optimizer.empty() ? train_default_choice(spec, "optimizer", "sgd", L::optimizers)
                                  : check_setting("--optimizer", optimizer, L::optimizers);
  s.lr = train_default_real(spec, "lr", 0.01, L::lr);
  s.momentum = train_default_real(spec, "momentum", 0.0, L::momentum);
  s.weight_decay = train_default_real(spec, "weight_decay", 0.0, L::weight_decay);
  check_optimizer_settings(spec, s.optimizer, std::nullopt, std::nullopt);
  return s;
}

}  // namespace freight::profile
