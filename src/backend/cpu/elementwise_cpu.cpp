// CPU kernels of the elementwise family: contiguous fast paths vectorised by the compiler,
// strided paths that walk the last dimension as an inner loop.
#include <array>
#include <cmath>
#include <cstring>

#include "backend/cpu/dispatch.h"
#include "backend/cpu/parallel.h"
#include "backend/cpu/unary_rules.h"
#include "backend/cpu/vec_math.h"
#include "ops/kernels/elementwise.h"

namespace freight::cpu {
namespace {

// Visits every element of `shape` row by row: fn(offsets of each operand at the row start,
// row length, each operand's stride along the last dimension), with rows split over threads.
template <size_t N, class Fn>
void for_each_row(const Shape& shape, const std::array<const Shape*, N>& strides, Fn&& fn) {
  int64_t rank = int64_t(shape.size());
  if (rank == 0) {
    std::array<int64_t, N> off{}, inner{};
    fn(off, int64_t(1), inner);
    return;
  }
  int64_t cols = shape[rank - 1];
  int64_t rows = shape_numel(shape) / std::max<int64_t>(cols, 1);
  std::array<int64_t, N> inner;
  for (size_t k = 0; k < N; ++k) inner[k] = (*strides[k])[rank - 1];
  parallel_for(rows, std::max<int64_t>(1, elementwise_grain() / std::max<int64_t>(cols, 1)),
               [&](int64_t r0, int64_t r1) {
                 for (int64_t r = r0; r < r1; ++r) {
                   std::array<int64_t, N> off{};
                   int64_t rem = r;
                   for (int64_t d = rank - 2; d >= 0; --d) {
                     int64_t i = rem % shape[d];
                     rem /= shape[d];
                     for (size_t k = 0; k < N; ++k) off[k] += i * (*strides[k])[d];
                   }
                   fn(off, cols, inner);
                 }
               });
}

// ---------------------------------------------------------------- fill and copy
void fill_cpu(Tensor& out, double value) {
  dispatch_all(out.dtype(), "fill", [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(out.data_ptr());
    T v = T(value);
    parallel_for(out.numel(), elementwise_grain(), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) p[i] = v;
    });
  });
}

template <class S, class D>
void copy_typed(const Tensor& src, Tensor& dst) {
  const S* s = static_cast<const S*>(src.data_ptr());
  D* d = static_cast<D*>(dst.data_ptr());
  if (src.is_contiguous() && dst.is_contiguous()) {
    if constexpr (std::is_same_v<S, D>) {
      parallel_for(src.numel(), elementwise_grain() * 4, [&](int64_t b, int64_t e) {
        std::memcpy(d + b, s + b, size_t(e - b) * sizeof(S));
      });
    } else {
      parallel_for(src.numel(), elementwise_grain(), [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) d[i] = D(s[i]);
      });
    }
    return;
  }
  for_each_row<2>(
      dst.shape(), {&src.strides(), &dst.strides()},
      [&](const std::array<int64_t, 2>& off, int64_t n, const std::array<int64_t, 2>& st) {
        const S* ps = s + off[0];
        D* pd = d + off[1];
        if (st[0] == 1 && st[1] == 1) {
          for (int64_t i = 0; i < n; ++i) pd[i] = D(ps[i]);
        } else if (st[0] == 0) {
          D v = D(ps[0]);
          for (int64_t i = 0; i < n; ++i) pd[i * st[1]] = v;
        } else {
          for (int64_t i = 0; i < n; ++i) pd[i * st[1]] = D(ps[i * st[0]]);
        }
      });
}

void copy_cpu(const Tensor& src, Tensor& dst) {
  dispatch_all(src.dtype(), "copy", [&](auto stag) {
    dispatch_all(dst.dtype(), "copy",
                 [&](auto dtag) { copy_typed<decltype(stag), decltype(dtag)>(src, dst); });
  });
}

// ---------------------------------------------------------------- binary
template <class T, class F>
void binary_typed(const Tensor& a, const Tensor& b, Tensor& out, F f) {
  const T* pa = static_cast<const T*>(a.data_ptr());
  const T* pb = static_cast<const T*>(b.data_ptr());
  T* po = static_cast<T*>(out.data_ptr());
  if (a.is_contiguous() && b.is_contiguous()) {
    parallel_for(out.numel(), elementwise_grain(), [&](int64_t s, int64_t e) {
#pragma omp simd
      for (int64_t i = s; i < e; ++i) po[i] = f(pa[i], pb[i]);
    });
    return;
  }
  for_each_row<3>(
      out.shape(), {&a.strides(), &b.strides(), &out.strides()},
      [&](const std::array<int64_t, 3>& off, int64_t n, const std::array<int64_t, 3>& st) {
        const T* x = pa + off[0];
        const T* y = pb + off[1];
        T* z = po + off[2];
        if (st[0] == 1 && st[1] == 1) {
#pragma omp simd
          for (int64_t i = 0; i < n; ++i) z[i] = f(x[i], y[i]);
        } else if (st[0] == 1 && st[1] == 0) {
          T v = y[0];
#pragma omp simd
          for (int64_t i = 0; i < n; ++i) z[i] = f(x[i], v);
        } else if (st[0] == 0 && st[1] == 1) {
          T v = x[0];
#pragma omp simd
          for (int64_t i = 0; i < n; ++i) z[i] = f(v, y[i]);
        } else {
          for (int64_t i = 0; i < n; ++i) z[i] = f(x[i * st[0]], y[i * st[1]]);
        }
      });
}

void binary_cpu(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  dispatch_floating(out.dtype(), "binary", [&](auto tag) {
    using T = decltype(tag);
    switch (op) {
      case BinaryOp::Add:
        binary_typed<T>(a, b, out, [](T x, T y) { return x + y; });
        break;
      case BinaryOp::Sub:
        binary_typed<T>(a, b, out, [](T x, T y) { return x - y; });
        break;
      case BinaryOp::Mul:
        binary_typed<T>(a, b, out, [](T x, T y) { return x * y; });
        break;
      case BinaryOp::Div:
        binary_typed<T>(a, b, out, [](T x, T y) { return x / y; });
        break;
      case BinaryOp::AddRelu:  // relu's own rule on the rounded sum
        binary_typed<T>(a, b, out, [](T x, T y) { return relu_value(T(x + y)); });
        break;
    }
  });
}

void scalar_cpu(ScalarOp op, const Tensor& a, double s, Tensor& out) {
  dispatch_floating(out.dtype(), "scalar", [&](auto tag) {
    using T = decltype(tag);
    const T* x = static_cast<const T*>(a.data_ptr());
    T* y = static_cast<T*>(out.data_ptr());
    T v = T(s);
    parallel_for(out.numel(), elementwise_grain(), [&](int64_t b, int64_t e) {
      if (op == ScalarOp::Mul) {
#pragma omp simd
        for (int64_t i = b; i < e; ++i) y[i] = x[i] * v;
      } else {
#pragma omp simd
        for (int64_t i = b; i < e; ++i) y[i] = x[i] + v;
      }
    });
  });
}

void axpy_cpu(double alpha, const Tensor& x, Tensor& y) {
  dispatch_floating(y.dtype(), "axpy", [&](auto tag) {
    using T = decltype(tag);
    const T* px = static_cast<const T*>(x.data_ptr());
    T* py = static_cast<T*>(y.data_ptr());
    T a = T(alpha);
    parallel_for(y.numel(), elementwise_grain(), [&](int64_t b, int64_t e) {
#pragma omp simd
      for (int64_t i = b; i < e; ++i) py[i] += a * px[i];
    });
  });
}

// ---------------------------------------------------------------- unary
template <class T, class F>
void map1(const T* x, T* y, int64_t n, F f) {
  parallel_for(n, elementwise_grain(), [&](int64_t b, int64_t e) {
#pragma omp simd
    for (int64_t i = b; i < e; ++i) y[i] = f(x[i]);
  });
}

// One case per row of freight/unary_ops.h, each calling the op's rule (unary_rules.h).
template <class T>
void unary_typed(UnaryOp op, const T* x, T* y, int64_t n) {
  switch (op) {
#define FREIGHT_UNARY_CASE(E, ...)                                  \
  case UnaryOp::E:                                                  \
    map1(x, y, n, [](T v) { return UnaryRule<UnaryOp::E>::f(v); }); \
    break;
    FREIGHT_UNARY_OPS(FREIGHT_UNARY_CASE, FREIGHT_UNARY_CASE)
#undef FREIGHT_UNARY_CASE
  }
}

void unary_cpu(UnaryOp op, const Tensor& x, Tensor& y) {
  if (x.dtype() == DType::F32)
    unary_typed(op, x.data<float>(), y.data<float>(), x.numel());
  else if (x.dtype() == DType::F64)
    unary_typed(op, x.data<double>(), y.data<double>(), x.numel());
  else
    dispatch_floating(x.dtype(), "unary", [](auto) {});
}

// gx = gy · f'(x), each rule written from whichever of x and y = f(x) is cheaper.
template <class T, class F>
void map3(const T* a, const T* b, const T* c, T* out, int64_t n, F f) {
  parallel_for(n, elementwise_grain(), [&](int64_t s, int64_t e) {
#pragma omp simd
    for (int64_t i = s; i < e; ++i) out[i] = f(a[i], b[i], c[i]);
  });
}

template <class T>
void unary_backward_typed(UnaryOp op, const T* x, const T* y, const T* gy, T* gx, int64_t n) {
  switch (op) {
#define FREIGHT_UNARY_GRAD_CASE(E, ...)                                                        \
  case UnaryOp::E:                                                                             \
    map3(x, y, gy, gx, n, [](T u, T v, T g) { return UnaryRule<UnaryOp::E>::grad(u, v, g); }); \
    break;
    FREIGHT_UNARY_OPS(FREIGHT_UNARY_GRAD_CASE, FREIGHT_UNARY_GRAD_CASE)
#undef FREIGHT_UNARY_GRAD_CASE
  }
}

void unary_backward_cpu(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& gy,
                        Tensor& gx) {
  dispatch_floating(x.dtype(), "unary_backward", [&](auto tag) {
    using T = decltype(tag);
    unary_backward_typed<T>(
        op, static_cast<const T*>(x.data_ptr()), static_cast<const T*>(y.data_ptr()),
        static_cast<const T*>(gy.data_ptr()), static_cast<T*>(gx.data_ptr()), x.numel());
  });
}

}  // namespace

FREIGHT_REGISTER_KERNEL(kernels::fill, CPU, fill_cpu);
FREIGHT_REGISTER_KERNEL(kernels::copy, CPU, copy_cpu);
FREIGHT_REGISTER_KERNEL(kernels::binary, CPU, binary_cpu);
FREIGHT_REGISTER_KERNEL(kernels::scalar, CPU, scalar_cpu);
FREIGHT_REGISTER_KERNEL(kernels::axpy, CPU, axpy_cpu);
FREIGHT_REGISTER_KERNEL(kernels::unary, CPU, unary_cpu);
FREIGHT_REGISTER_KERNEL(kernels::unary_backward, CPU, unary_backward_cpu);

}  // namespace freight::cpu
