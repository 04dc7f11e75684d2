// NumPy's .npz archives: a zip file of .npy entries, one per array ("x.npy" holds the array x).
// np.savez stores its entries, np.savez_compressed deflates them; both are read, ZIP64 included
// (NumPy writes it for large arrays). Every entry's CRC-32 is checked. Errors name the archive,
// the entry and what is wrong.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "freight/tensor.h"

namespace freight::data {

class NpzFile {
 public:
  // Reads the archive's central directory (its list of entries) and checks it against the file.
  explicit NpzFile(const std::string& path);
  ~NpzFile();
  NpzFile(const NpzFile&) = delete;
  NpzFile& operator=(const NpzFile&) = delete;

  const std::string& path() const;
  // The arrays' names in archive order: the entry names without ".npy", as np.load lists them.
  const std::vector<std::string>& names() const;
  bool contains(const std::string& name) const;
  // One array as a CPU tensor of its own dtype. A deflated entry is inflated once to check its
  // size and CRC-32 before anything is allocated for it, then again into the tensor.
  Tensor read(const std::string& name) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace freight::data
