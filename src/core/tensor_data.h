// In-place replacement of what a tensor handle views. Internal.
#pragma once
#include "freight/tensor.h"

namespace freight {

// Makes `dst` view `src`'s storage, offset, shape, strides and dtype, in place: every handle that
// shares dst's TensorImpl (a module's parameter list, an optimizer) sees the new data, which is
// how Module::to(device) moves parameters without invalidating handles held elsewhere (PyTorch's
// `param.data = new_data`). `dst` must be a leaf; its gradient is left alone (the caller moves it)
// and its gradient accumulator node is dropped, since that node recorded the old device and
// dtype (a fresh one is made on the next backward).
void set_tensor_data(const Tensor& dst, const Tensor& src);

}  // namespace freight
