// Networks as data: a model file (models/<name>.json, or any path) describes the input, the
// layers and the default training settings; build_model() turns it into modules at run time.
// The format is documented in docs/model-format.md; bench/pytorch/freight_models.py builds the
// identical PyTorch network from the same file.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "freight/nn/module.h"

namespace freight::nn {

struct ModelSpec {
  std::string name;
  std::string description;
  std::string path;                // the file it was read from
  Shape input_shape;               // one sample, without the batch dimension
  DType input_dtype = DType::F32;  // int64 for token inputs (embedding first)
  int64_t classes = 0;
  int64_t vocab = 0;              // token models: inputs are in [0, vocab)
  std::string task = "classify";  // or "language_model" (a prediction per time step)
  std::string layers_json;        // the "layers" array, as JSON text
  // Default training settings ("train" object): strings as written ("sgd", "0.05", ...).
  std::map<std::string, std::string> train_defaults;
};

// Reads a model by zoo name ("mlp") or by path ("my_net.json", anything with a '/'). A name is
// looked up in FREIGHT_MODEL_PATH (colon-separated), FREIGHT_MODELS_DIR, the installed
// <prefix>/share/freight/models, then a build tree's source models/; when it is nowhere, the
// error lists every place it looked. Errors name the file and the problem (unknown layer type,
// missing field, shapes that do not fit, with the layer's index).
ModelSpec load_model_spec(const std::string& name_or_path);
// The same from JSON text already in memory; `origin` names it in errors.
ModelSpec parse_model_spec(const std::string& json_text, const std::string& origin);
// The spec as model-file JSON (what a checkpoint's "model_spec" metadata holds); parse_model_spec
// reads it back to the same spec.
std::string model_spec_json(const ModelSpec& spec);
// Names of the models in the zoo (the first directory of the search that holds any), sorted.
std::vector<std::string> zoo_models();
// What building a spec would make, found without allocating any weights. Throws freight::Error
// naming the file and layer when the network does not fit together or is beyond a limit (layers,
// parameters, values per sample, FLOPs: docs/model-format.md#limits).
struct ModelSize {
  int64_t layers = 0;      // modules after expanding repeats
  int64_t parameters = 0;  // weights and biases
  double flops = 0;        // forward FLOPs per sample
};
ModelSize measure_model(const ModelSpec& spec);
// The network of a spec, freshly initialised from the default generator (measure_model first).
ModulePtr build_model(const ModelSpec& spec);

}  // namespace freight::nn
