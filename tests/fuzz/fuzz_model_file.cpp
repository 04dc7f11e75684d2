// libFuzzer target: the model-file parser and the model it builds, on arbitrary text.
#include "freight/nn/model_file.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  freight::fuzz::expect_clean([&] {
    freight::nn::ModelSpec spec = freight::nn::parse_model_spec(text, "fuzz input");
    // Models within the limits may still be large (up to 1e9 parameters, 4 GB): those are
    // measured, not built, so the fuzzer's memory limit catches only allocations the input
    // cannot justify. 16M parameters (64 MB) is beyond every zoo model.
    if (freight::nn::measure_model(spec).parameters > 16'000'000) return;
    freight::nn::ModulePtr model = freight::nn::build_model(spec);
    (void)model;
  });
  return 0;
}
