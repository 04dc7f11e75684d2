// Typed views of a tensor's data for kernels (CPU and CUDA host code alike), null for an
// undefined tensor: the optional operands of an op (an affine weight, a bias, running
// statistics) pass through as null pointers.
#pragma once
#include "freight/tensor.h"

namespace freight {

template <class T>
const T* cptr(const Tensor& t) {
  return t.defined() ? static_cast<const T*>(t.data_ptr()) : nullptr;
}

template <class T>
T* mptr(Tensor& t) {
  return t.defined() ? static_cast<T*>(t.data_ptr()) : nullptr;
}

}  // namespace freight
