// CIFAR-10 and CIFAR-100 in their binary distributions (cifar-10-binary.tar.gz,
// cifar-100-binary.tar.gz). A batch file is a run of fixed-size records, each one image:
//   CIFAR-10:  1 label byte (0-9),                      then 3072 pixel bytes
//   CIFAR-100: 1 coarse label byte (0-19), 1 fine (0-99), then 3072 pixel bytes
// the pixels being 3 planes (red, green, blue) of 32x32, row-major. The fine label is used.
#pragma once
#include <string>
#include <utility>

#include "freight/data/dataset.h"

namespace freight::data {

// One batch file: uint8 inputs [N, 3, 32, 32] and labels [N]. classes is 10 or 100.
Dataset read_cifar_batch(const std::string& path, int classes);

// The train or test split of a directory in the official layout:
//   CIFAR-10:  data_batch_1.bin ... data_batch_5.bin (train), test_batch.bin (test)
//   CIFAR-100: train.bin, test.bin
// `dir` may also be the folder the tarball unpacks into, which holds cifar-10-batches-bin/ or
// cifar-100-binary/. A missing file is an error that lists every file expected.
Dataset load_cifar(const std::string& dir, int classes, const std::string& split);

// --data cifar10:DIR and cifar100:DIR. is_cifar_data also takes a bare "cifar10" / "cifar100",
// which load_cifar_data refuses with the form to use.
bool is_cifar_data(const std::string& data);
Dataset load_cifar_data(const std::string& data, const std::string& split);

// Mean and standard deviation of all pixel values (the three channels together) of the training
// set, on the [0, 1] scale: what the loader's single-value normalisation takes.
std::pair<double, double> cifar_normalisation(int classes);

}  // namespace freight::data
