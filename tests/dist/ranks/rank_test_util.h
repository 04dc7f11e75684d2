// Helpers of the rank tests: gtest programs that run inside `mpirun -np N` (every rank runs
// every test, so a test must make the same collectives on every rank: compare with EXPECT after
// the last collective, never ASSERT before one).
#pragma once
#include <string>
#include <vector>

#include "freight/dist.h"
#include "freight/tensor.h"

namespace freight::test {

// A directory every rank of the job names the same (rank 0's choice, broadcast), created and
// empty; removed by rank 0 when the object goes.
class SharedTempDir {
 public:
  explicit SharedTempDir(const std::string& tag);
  ~SharedTempDir();
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Rank 0's copy of `t` (a CPU tensor) on every rank.
Tensor from_rank0(const Tensor& t);

// The largest |a − b| over two lists of named tensors with the same names and shapes.
double max_abs_difference(const std::vector<std::pair<std::string, Tensor>>& a,
                          const std::vector<std::pair<std::string, Tensor>>& b);
double max_abs_value(const std::vector<std::pair<std::string, Tensor>>& a);

}  // namespace freight::test
