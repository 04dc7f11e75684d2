// Default initialisation helpers of the layers. Internal.
#pragma once
#include <cmath>
#include <cstdint>

#include "freight/tensor.h"

namespace freight::nn {

// U(−bound, bound) float32 on the CPU from the global generator.
inline Tensor uniform_init(const Shape& shape, double bound) {
  return Tensor::uniform(shape, -bound, bound);
}

// PyTorch's default for Linear and Conv2d weights, kaiming_uniform(a = √5): the gain is
// √(2 / (1 + a²)) = √(1/3) and the bound gain·√(3 / fan_in) = 1/√fan_in. Their biases use the
// same bound 1/√fan_in.
inline double default_bound(int64_t fan_in) {
  return fan_in > 0 ? 1.0 / std::sqrt(double(fan_in)) : 0.0;
}

}  // namespace freight::nn
