// The start of a data-parallel job: every rank must have built the same model with the same run
// settings (else the sums over the ranks would mix unrelated tensors, or the ranks would run
// different numbers of steps and wait on each other for ever), and every rank then starts from
// rank 0's values. Internal to the library.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "freight/tensor.h"

namespace freight::dist {

using NamedTensorList = std::vector<std::pair<std::string, Tensor>>;

// One line per tensor ("name dtype [shape]") and the settings line: what must be equal.
std::string describe_model(const NamedTensorList& state, const std::string& settings);
// All ranks compare their descriptions (a hash, then the text when the hashes differ). Throws
// freight::Error on every rank that differs from rank 0, naming the first difference:
//   rank 1 built a different model than rank 0: '2.weight' is float32 [10, 256] there, float32
//   [10, 512] on rank 0
void check_same_model(const NamedTensorList& state, const std::string& settings);
// Rank 0's values of every tensor (CPU tensors, in place) to every rank.
void broadcast_from_rank0(const NamedTensorList& state, const std::string& what);

}  // namespace freight::dist
