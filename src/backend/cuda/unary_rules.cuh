// The CUDA rule of each unary op of freight/unary_ops.h: value(v) = f(v) and
// grad(x, y, gy) = gy · f'(x), written from whichever of x and y = f(x) the descriptor row says
// the backward keeps (only that one may be read: the other pointer may be null). The same rules
// as the CPU's (src/backend/cpu/unary_rules.h). An op without a rule here does not compile.
#pragma once
#include "backend/cuda/device_math.cuh"
#include "freight/unary_ops.h"

namespace freight::cuda {

template <UnaryOp Op>
struct UnaryRule;

template <>
struct UnaryRule<UnaryOp::Neg> {
  template <class T>
  __device__ static T value(T v) {
    return -v;
  }
  template <class T>
  __device__ static T grad(T, T, T g) {
    return -g;
  }
};

template <>
struct UnaryRule<UnaryOp::Exp> {
  template <class T>
  __device__ static T value(T v) {
    return d_exp(v);
  }
  template <class T>
  __device__ static T grad(T, T y, T g) {
    return g * y;
  }  // (eˣ)' = eˣ = y
};

template <>
struct UnaryRule<UnaryOp::Log> {
  template <class T>
  __device__ static T value(T v) {
    return d_log(v);
  }
  template <class T>
  __device__ static T grad(T x, T, T g) {
    return g / x;
  }  // (log x)' = 1/x
};

template <>
struct UnaryRule<UnaryOp::Sqrt> {
  template <class T>
  __device__ static T value(T v) {
    return d_sqrt(v);
  }
  template <class T>
  __device__ static T grad(T, T y, T g) {
    return g / (T(2) * y);
  }  // (√x)' = 1/(2√x)
};

template <>
struct UnaryRule<UnaryOp::Square> {
  template <class T>
  __device__ static T value(T v) {
    return v * v;
  }
  template <class T>
  __device__ static T grad(T x, T, T g) {
    return T(2) * x * g;
  }  // (x²)' = 2x
};

// relu as the CPU's rule (src/backend/cpu/unary_rules.h) and PyTorch: v < 0 ? 0 : v (a NaN
// passes, −0 stays −0); its gradient passes where the output is not <= 0 (positive or NaN). The
// fused kernels (convolution bias, pooling, batch norm, add_relu) call these two.
template <class T>
__device__ __forceinline__ T relu_value(T v) {
  return v < T(0) ? T(0) : v;
}
template <class T>
__device__ __forceinline__ bool relu_passes(T y) {
  return !(y <= T(0));
}

template <>
struct UnaryRule<UnaryOp::Relu> {
  template <class T>
  __device__ static T value(T v) {
    return relu_value(v);
  }
  template <class T>
  __device__ static T grad(T, T y, T g) {
    return relu_passes(y) ? g : T(0);
  }
};

template <>
struct UnaryRule<UnaryOp::Sigmoid> {
  template <class T>
  __device__ static T value(T v) {
    return T(1) / (T(1) + d_exp(-v));
  }
  template <class T>
  __device__ static T grad(T, T y, T g) {
    return g * y * (T(1) - y);
  }  // σ' = σ(1 − σ)
};

template <>
struct UnaryRule<UnaryOp::Tanh> {
  template <class T>
  __device__ static T value(T v) {
    return d_tanh(v);
  }
  template <class T>
  __device__ static T grad(T, T y, T g) {
    return g * (T(1) - y * y);
  }  // tanh' = 1 − tanh²
};

// GELU, exact form: gelu(x) = x·Φ(x) = x/2 · (1 + erf(x/√2)); its derivative is
// Φ(x) + x·φ(x) with φ(x) = exp(−x²/2)/√(2π).
template <>
struct UnaryRule<UnaryOp::Gelu> {
  template <class T>
  __device__ static T value(T x) {
    return T(0.5) * x * (T(1) + d_erf(x * T(0.70710678118654752)));
  }
  template <class T>
  __device__ static T grad(T x, T, T g) {
    T cdf = T(0.5) * (T(1) + d_erf(x * T(0.70710678118654752)));
    T pdf = T(0.39894228040143268) * d_exp(T(-0.5) * x * x);
    return g * (cdf + x * pdf);
  }
};

// silu(x) = x·σ(x); silu'(x) = σ(x)·(1 + x·(1 − σ(x))).
template <>
struct UnaryRule<UnaryOp::Silu> {
  template <class T>
  __device__ static T value(T x) {
    return x / (T(1) + d_exp(-x));
  }
  template <class T>
  __device__ static T grad(T x, T, T g) {
    T s = T(1) / (T(1) + d_exp(-x));
    return g * s * (T(1) + x * (T(1) - s));
  }
};

}  // namespace freight::cuda
