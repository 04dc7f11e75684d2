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

// The sign of the kept output; 0 at the kink, as the CPU.
template <>
struct UnaryRule<UnaryOp::Relu> {
  template <class T>
  __device__ static T value(T v) {
    return v > T(0) ? v : T(0);
  }
  template <class T>
  __device__ static T grad(T, T y, T g) {
    return y > T(0) ? g : T(0);
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
