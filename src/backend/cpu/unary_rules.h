// The CPU rule of each unary op of freight/unary_ops.h: its value f(v) in float32 (the
// vectorisable functions of vec_math.h) and float64 (libm), and its derivative
// grad(x, y, gy) = gy · f'(x), written from whichever of x and y = f(x) the descriptor row says
// the backward keeps (only that one may be read). An op without a rule here does not compile.
#pragma once
#include <cmath>
#include <type_traits>

#include "backend/cpu/vec_math.h"
#include "freight/unary_ops.h"

namespace freight::cpu {

template <UnaryOp Op>
struct UnaryRule;

template <>
struct UnaryRule<UnaryOp::Neg> {
  static float f(float v) { return -v; }
  static double f(double v) { return -v; }
  template <class T>
  static T grad(T, T, T g) {
    return -g;
  }
};

template <>
struct UnaryRule<UnaryOp::Exp> {
  static float f(float v) { return vexp_full(v); }
  static double f(double v) { return std::exp(v); }
  template <class T>
  static T grad(T, T y, T g) {
    return g * y;
  }
};

template <>
struct UnaryRule<UnaryOp::Log> {
  static float f(float v) { return std::log(v); }
  static double f(double v) { return std::log(v); }
  template <class T>
  static T grad(T x, T, T g) {
    return g / x;
  }
};

template <>
struct UnaryRule<UnaryOp::Sqrt> {
  static float f(float v) { return std::sqrt(v); }
  static double f(double v) { return std::sqrt(v); }
  template <class T>
  static T grad(T, T y, T g) {
    return g / (T(2) * y);
  }
};

template <>
struct UnaryRule<UnaryOp::Square> {
  static float f(float v) { return v * v; }
  static double f(double v) { return v * v; }
  template <class T>
  static T grad(T x, T, T g) {
    return T(2) * x * g;
  }
};

// relu as PyTorch computes it: v < 0 ? 0 : v, so a NaN passes through (a diverged value stays
// visible downstream) and −0 stays −0. Its gradient passes where the output is not <= 0: where
// it is positive or NaN (PyTorch's threshold_backward). The fused kernels (convolution, pooling,
// batch norm, add_relu) call these two, so that each fused pair equals the unfused one bit for bit.
template <class T>
inline T relu_value(T v) {
  return v < T(0) ? T(0) : v;
}
template <class T>
inline bool relu_passes(T y) {
  return !(y <= T(0));
}

// The rule reads the kept output (the op passes it in both slots).
template <>
struct UnaryRule<UnaryOp::Relu> {
  static float f(float v) { return relu_value(v); }
  static double f(double v) { return relu_value(v); }
  template <class T>
  static T grad(T, T y, T g) {
    return relu_passes(y) ? g : T(0);
  }
};

template <>
struct UnaryRule<UnaryOp::Sigmoid> {
  static float f(float v) { return vsigmoid(v); }
  static double f(double v) { return 1.0 / (1.0 + std::exp(-v)); }
  template <class T>
  static T grad(T, T y, T g) {
    return g * y * (T(1) - y);
  }  // σ' = σ(1 − σ)
};

template <>
struct UnaryRule<UnaryOp::Tanh> {
  static float f(float v) { return vtanh(v); }
  static double f(double v) { return std::tanh(v); }
  template <class T>
  static T grad(T, T y, T g) {
    return g * (T(1) - y * y);
  }  // tanh' = 1 − tanh²
};

template <>
struct UnaryRule<UnaryOp::Gelu> {
  static float f(float v) { return vgelu(v); }
  static double f(double v) { return gelu(v); }
  template <class T>
  static T grad(T x, T, T g) {
    if constexpr (std::is_same_v<T, float>)
      return g * vgelu_grad(x);
    else
      return g * gelu_grad(x);
  }
};

// silu(x) = x·σ(x); silu'(x) = σ(x) + x·σ(x)(1 − σ(x)) = σ(x)·(1 + x·(1 − σ(x))).
template <>
struct UnaryRule<UnaryOp::Silu> {
  static float f(float v) { return v * vsigmoid(v); }
  static double f(double v) { return v / (1.0 + std::exp(-v)); }
  template <class T>
  static T grad(T x, T, T g) {
    T s = UnaryRule<UnaryOp::Sigmoid>::f(x);
    return g * s * (T(1) + x * (T(1) - s));
  }
};

}  // namespace freight::cpu
