// The affine map of the loader's normalisation in float, computed once so every backend maps a
// value the same way: uint8 pixels become fma(float(pixel), scale, shift) with
// scale = (1/std)/255 and shift = −mean·(1/std); float inputs become (x − mean)·inv_std.
// A header of its own below the loader: the backends' batch-gathering kernels
// (ops/kernels/data.h) apply the same map and need nothing else from the data layer.
#pragma once

namespace freight::data {

struct Normalisation {
  float scale, shift, mean, inv_std;
};

// Inline so that the kernels of every backend compute the constants with the same few roundings
// (no operation here can be contracted into a fused multiply-add).
inline Normalisation normalisation(double mean, double std) {
  Normalisation n;
  n.inv_std = float(1.0 / std);
  n.mean = float(mean);
  n.scale = n.inv_std / 255.0f;
  n.shift = -n.mean * n.inv_std;
  return n;
}

}  // namespace freight::data
