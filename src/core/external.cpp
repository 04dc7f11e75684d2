// Tensors over external memory (freight/external.h).
#include "freight/external.h"

#include <fmt/format.h>

#include "core/backend.h"
#include "core/tensor_impl.h"
#include "freight/error.h"

namespace freight {

Tensor from_external(void* data, const Shape& shape, const Shape& strides, DType dtype,
                     Device device, std::function<void()> release) {
  FREIGHT_CHECK(shape.size() == strides.size(),
                fmt::format("from_external: shape {} and strides {} differ in length",
                            shape_str(shape), shape_str(strides)));
  // The storage spans from the first element to the last one the strides reach.
  int64_t numel = 1, last = 0;
  for (size_t d = 0; d < shape.size(); ++d) {
    FREIGHT_CHECK(shape[d] >= 0,
                  fmt::format("from_external: negative size in shape {}", shape_str(shape)));
    FREIGHT_CHECK(strides[d] >= 0,
                  fmt::format("from_external: shape {} with strides {}: negative strides (a "
                              "reversed view) are not supported; copy the array first",
                              shape_str(shape), shape_str(strides)));
    numel *= shape[d];
    if (shape[d] > 0) last += (shape[d] - 1) * strides[d];
  }
  FREIGHT_CHECK(numel == 0 || data != nullptr,
                fmt::format("from_external: no memory for a tensor of shape {}", shape_str(shape)));
  const size_t nbytes = numel == 0 ? 0 : size_t(last + 1) * dtype_size(dtype);
  if (!release) release = [] {};  // an empty release would make the storage free the memory
  auto impl = std::make_shared<TensorImpl>();
  impl->dtype = dtype;
  impl->shape = shape;
  impl->strides = strides;
  impl->storage = std::make_shared<Storage>(data, nbytes, device, std::move(release));
  impl->recompute_layout();
  return Tensor(std::move(impl));
}

uintptr_t device_stream(Device device) {
  if (device.is_cpu()) return 0;
  return reinterpret_cast<uintptr_t>(backend_for(device.type).stream_handle(device.index));
}

}  // namespace freight
