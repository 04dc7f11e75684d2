// Tensors over external memory (freight/external.h).
#include "freight/external.h"

#include <fmt/format.h>

#include <cstdint>

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
    // Sizes come from other libraries' headers (a DLPack capsule can say anything): a product
    // that wraps around would make a small storage that the tensor then overruns.
    int64_t reach = 0;
    const bool wraps = __builtin_mul_overflow(numel, shape[d], &numel) ||
                       (shape[d] > 0 && (__builtin_mul_overflow(shape[d] - 1, strides[d], &reach) ||
                                         __builtin_add_overflow(last, reach, &last)));
    FREIGHT_CHECK(!wraps, fmt::format("from_external: shape {} with strides {} spans more memory "
                                      "than can be addressed",
                                      shape_str(shape), shape_str(strides)));
  }
  FREIGHT_CHECK(numel == 0 || (last + 1) <= int64_t(SIZE_MAX / 2 / dtype_size(dtype)),
                fmt::format("from_external: shape {} with strides {} spans more memory than can "
                            "be addressed",
                            shape_str(shape), shape_str(strides)));
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
