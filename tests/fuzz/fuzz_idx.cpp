// libFuzzer target: the IDX reader (plain and gzip, through zlib) on arbitrary bytes.
#include "freight/data/dataset.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string path = freight::fuzz::write_input(data, size);
  freight::fuzz::expect_clean([&] {
    freight::data::IdxArray a = freight::data::read_idx(path);
    (void)a;
  });
  return 0;
}
