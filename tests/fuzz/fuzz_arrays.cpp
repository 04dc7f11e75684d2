// libFuzzer target: the array readers on arbitrary bytes, each given the same file: a .npy
// array, an .npz archive (every entry it lists, stored or deflated) and a CIFAR-10 and CIFAR-100
// batch. Each may only end in a freight::Error, and allocate what the input can justify.
#include "freight/data/cifar.h"
#include "freight/data/npy.h"
#include "freight/data/npz.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace freight::data;
  std::string path = freight::fuzz::write_input(data, size);
  freight::fuzz::expect_clean([&] { (void)read_npy(path); });
  freight::fuzz::expect_clean([&] {
    NpzFile npz(path);
    for (const std::string& name : npz.names())
      freight::fuzz::expect_clean([&] { (void)npz.read(name); });
  });
  for (int classes : {10, 100})
    freight::fuzz::expect_clean([&] { (void)read_cifar_batch(path, classes); });
  return 0;
}
