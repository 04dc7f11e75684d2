// embedding: a row gather from a [num, dim] table. Its backward scatter-adds the output gradient
// into a dense gradient of the table (indices get none).
#include <fmt/format.h>

#include "core/autograd_node.h"
#include "freight/error.h"
#include "freight/ops.h"
#include "ops/kernels/embedding.h"
#include "ops/op_utils.h"

namespace freight {

Tensor embedding(const Tensor& indices, const Tensor& weight) {
  FREIGHT_CHECK(indices.defined() && weight.defined(), "embedding: undefined operand");
  check_floating(weight, "embedding");
  FREIGHT_CHECK(weight.dim() == 2, fmt::format("embedding: weight must be 2-D [num, dim], got {}",
                                               shape_str(weight.shape())));
  FREIGHT_CHECK(indices.dtype() == DType::I64,
                fmt::format("embedding: indices must be int64, got {} of shape {}",
                            dtype_name(indices.dtype()), shape_str(indices.shape())));
  FREIGHT_CHECK(indices.device() == weight.device(),
                fmt::format("embedding: indices on {} and weight on {}; move one with "
                            ".to(device)",
                            indices.device().str(), weight.device().str()));
  int64_t dim = weight.size(1);
  Shape out_shape = indices.shape();
  out_shape.push_back(dim);
  Tensor idx = packed(indices), w = packed(weight);
  Tensor out = Tensor::empty(out_shape, w.dtype(), w.device());
  if (idx.numel() > 0) kernels::embedding_forward(w.device().type, idx, w, out);
  if (needs_grad({&weight})) {
    Tensor si = idx.detach();
    Shape wshape = w.shape();
    DType dtype = w.dtype();
    Device device = w.device();
    record("embedding", {indices, weight}, {out},
           [si, wshape, dtype, device](const std::vector<Tensor>& g) {
             Tensor gw = Tensor::empty(wshape, dtype, device);
             if (gw.numel() > 0) {
               if (si.numel() == 0)
                 gw.zero_();
               else
                 kernels::embedding_backward(device.type, si, packed(g[0]), gw);
             }
             return std::vector<Tensor>{Tensor(), gw};
           });
  }
  return out;
}

}  // namespace freight
