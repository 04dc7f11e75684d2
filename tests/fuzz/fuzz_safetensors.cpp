// libFuzzer target: the safetensors loader (header length, JSON header, dtypes, shapes, offsets)
// on arbitrary bytes.
#include "freight/io/safetensors.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string path = freight::fuzz::write_input(data, size);
  freight::fuzz::expect_clean([&] {
    freight::io::SafetensorsFile f = freight::io::load_safetensors(path);
    (void)f;
  });
  return 0;
}
