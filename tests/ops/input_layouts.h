// Non-contiguous layouts of an op's inputs: the same logical values as a packed tensor, laid out
// in memory as a transposed view or as every other element of a larger buffer. The op table feeds
// them to every case (op_layouts_test.cpp): an op that hands a view to a kernel expecting packed
// operands reads the wrong elements.
#pragma once
#include <limits>
#include <string>

#include "freight/freight.h"
#include "ops/op_table.h"

namespace freight::test {

enum class Layout {
  Packed,      // row-major, no gaps
  Transposed,  // [..., a, b] stored as [..., b, a] and viewed through a transpose (rank >= 2)
  Strided,     // element k of the last dim at 2k of a buffer twice as long (rank >= 1)
};

inline std::string layout_name(Layout layout) {
  switch (layout) {
    case Layout::Packed:
      return "packed";
    case Layout::Transposed:
      return "transposed";
    case Layout::Strided:
      return "strided";
  }
  return "?";
}

// Whether `layout` can place a tensor of rank `rank` other than packed.
inline bool layout_applies(Layout layout, int64_t rank) {
  return layout == Layout::Transposed ? rank >= 2 : layout == Layout::Strided ? rank >= 1 : false;
}

// A fresh tensor on `device` with the values of `t`, laid out as `layout` (packed where the layout
// does not apply to t's rank). The buffer is filled on the CPU and moved to the device before the
// view is taken, so the device's own kernels meet the strides. No autograd history.
inline Tensor lay_out(const Tensor& t, Layout layout, Device device) {
  Tensor host = t.detach().to(Device::cpu());
  int64_t r = host.dim();
  if (!layout_applies(layout, r)) return host.clone().to(device);
  if (layout == Layout::Transposed) {
    // A packed copy of the transpose, transposed back: the last two dims' strides swapped.
    Tensor swapped = host.transpose(r - 2, r - 1).clone();
    return swapped.to(device).transpose(r - 2, r - 1);
  }
  // [..., n] as slot 0 of a [..., n, 2] buffer. Slot 1 holds poison, NaN (or -1 for integers: an
  // invalid index or label), so that an op which reads past the view shows it.
  Shape big = host.shape();
  big.push_back(2);
  double poison = is_floating(host.dtype()) ? std::numeric_limits<double>::quiet_NaN() : -1.0;
  Tensor buffer = Tensor::full(big, poison, host.dtype(), Device::cpu());
  buffer.select(r, 0).copy_(host);
  return buffer.to(device).select(r, 0);
}

// Every input of `in` laid out as `layout` on `device` (undefined inputs stay undefined).
inline Inputs lay_out_all(const Inputs& in, Layout layout, Device device) {
  Inputs out;
  for (const Tensor& t : in) out.push_back(t.defined() ? lay_out(t, layout, device) : t);
  return out;
}

}  // namespace freight::test
