// libFuzzer target: the model-file parser and the model it builds, on arbitrary text.
#include "freight/nn/model_file.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  freight::fuzz::expect_clean([&] {
    freight::nn::ModelSpec spec = freight::nn::parse_model_spec(text, "fuzz input");
    freight::nn::ModulePtr model = freight::nn::build_model(spec);
    (void)model;
  });
  return 0;
}
