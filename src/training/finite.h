// Non-finite values (NaN, ±inf) in named tensors: the guard that keeps a diverged run from
// saving its weights over a good checkpoint, and the warning of `freight eval`. Internal.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "freight/io/safetensors.h"

namespace freight::detail {

struct NonFinite {
  std::string name;
  int64_t count = 0;  // NaN or infinite values
  int64_t numel = 0;
};

// The tensors holding at least one NaN or infinity, in the given order. Integer tensors cannot
// hold either and are skipped; device tensors are copied to the host to be read.
std::vector<NonFinite> non_finite_tensors(const io::NamedTensors& tensors);

// "0.weight (3 of 40 values), 2.bias (all 10 values) and 4 more": the first `max_named`
// entries by name, the rest counted.
std::string describe_non_finite(const std::vector<NonFinite>& found, size_t max_named = 3);

}  // namespace freight::detail
