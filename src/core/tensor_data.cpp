#include "core/tensor_data.h"

#include "core/tensor_impl.h"
#include "freight/error.h"

namespace freight {

void set_tensor_data(const Tensor& dst, const Tensor& src) {
  FREIGHT_CHECK(dst.defined() && src.defined(), "set_tensor_data: undefined tensor");
  FREIGHT_CHECK(dst.is_leaf(),
                "set_tensor_data: only a leaf tensor (a parameter or buffer) can "
                "have its data replaced");
  TensorImpl& d = *dst.impl();
  const TensorImpl& s = *src.impl();
  d.storage = s.storage;
  d.offset = s.offset;
  d.shape = s.shape;
  d.strides = s.strides;
  d.numel = s.numel;
  d.dtype = s.dtype;
  d.contiguous = s.contiguous;
  d.grad_acc.reset();
}

}  // namespace freight
