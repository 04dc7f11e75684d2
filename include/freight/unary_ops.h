// The unary elementwise ops, one descriptor row each: the single source of what the engine knows
// about such an op. The enum UnaryOp, the public functions (freight::relu, ...), the names of
// kernels and autograd nodes, what the backward keeps, the activation layers (nn::ReLU, ...),
// their model-file types, their cost rules and the PyTorch twins of the benchmarks are all
// generated from the rows below.
//
// Adding an op takes four places: a row here, its CPU rule (UnaryRule in
// src/backend/cpu/unary_rules.h), its CUDA rule (UnaryRule in src/backend/cuda/unary_rules.cuh)
// and its op-table entry (tests/ops/cases_elementwise.cpp). A missing rule does not compile; a
// missing op-table entry fails tests/ops/unary_table_test.cpp.
//
// Columns:
//   Enum       UnaryOp::Enum, the kernels' op code
//   name       the public function freight::name(x); the name of its autograd node, its op-table
//              case and, for an activation, its model-file type ("type": "name")
//   Saves      what the backward keeps alive until it runs: Input (x), Output (y = f(x)) or
//              Nothing. Only that one tensor is kept: keeping both would hold, say, every ReLU's
//              input alive until the backward, an activation-sized tensor nothing else needs.
//   bwd_flops  FLOPs per element of the derivative (the cost model's backward rule; every
//              forward counts one FLOP per element, Module::flops' convention)
//   Layer      (activations only) the nn module class freight::nn::Layer, its describe() and
//              explain row type; also the name of the torch.nn class that is its PyTorch twin
#pragma once
#include <cstdint>
#include <string_view>

// Math functions: ops, not layers. Derivatives: neg −1; exp y; log 1/x; sqrt 1/(2y); square 2x.
#define FREIGHT_UNARY_MATH_OPS(X) \
  X(Neg, neg, Nothing, 1)         \
  X(Exp, exp, Output, 1)          \
  X(Log, log, Input, 1)           \
  X(Sqrt, sqrt, Output, 1)        \
  X(Square, square, Input, 1)

// Activations: ops and layers. relu (PyTorch's: x < 0 ? 0 : x, so relu(NaN) is NaN) reads its
// output: the gradient passes where y is not <= 0 (positive or NaN); sigmoid y(1 − y); tanh
// 1 − y²; gelu (exact form x·Φ(x), PyTorch's default) Φ(x) + x·φ(x); silu (x·σ(x))
// σ(x)·(1 + x·(1 − σ(x))).
#define FREIGHT_ACTIVATION_OPS(A)         \
  A(Relu, relu, Output, 1, ReLU)          \
  A(Sigmoid, sigmoid, Output, 2, Sigmoid) \
  A(Tanh, tanh, Output, 2, Tanh)          \
  A(Gelu, gelu, Input, 2, GELU)           \
  A(Silu, silu, Input, 4, SiLU)

// Every row: X(Enum, name, Saves, bwd_flops) for the math ops, A(..., Layer) for activations.
#define FREIGHT_UNARY_OPS(X, A) FREIGHT_UNARY_MATH_OPS(X) FREIGHT_ACTIVATION_OPS(A)

namespace freight {

#define FREIGHT_UNARY_ENUM(E, ...) E,
enum class UnaryOp : uint8_t { FREIGHT_UNARY_OPS(FREIGHT_UNARY_ENUM, FREIGHT_UNARY_ENUM) };
#undef FREIGHT_UNARY_ENUM

enum class UnarySaves : uint8_t { Nothing, Input, Output };

struct UnaryOpInfo {
  UnaryOp op;
  const char* name;
  UnarySaves saves;
  double bwd_flops;   // per element
  const char* layer;  // nullptr for a math op
};

#define FREIGHT_UNARY_INFO(E, n, S, b) {UnaryOp::E, #n, UnarySaves::S, b, nullptr},
#define FREIGHT_ACTIVATION_INFO(E, n, S, b, L) {UnaryOp::E, #n, UnarySaves::S, b, #L},
inline constexpr UnaryOpInfo kUnaryOps[] = {
    FREIGHT_UNARY_OPS(FREIGHT_UNARY_INFO, FREIGHT_ACTIVATION_INFO)};
#undef FREIGHT_UNARY_INFO
#undef FREIGHT_ACTIVATION_INFO

inline constexpr const UnaryOpInfo& unary_info(UnaryOp op) {
  return kUnaryOps[static_cast<int>(op)];  // rows are in enum order by construction
}

// The activation whose layer class is called `layer` (a module's name), or nullptr.
inline const UnaryOpInfo* activation_by_layer(std::string_view layer) {
  for (const UnaryOpInfo& info : kUnaryOps)
    if (info.layer && layer == info.layer) return &info;
  return nullptr;
}

}  // namespace freight
