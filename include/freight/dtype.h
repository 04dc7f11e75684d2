// Element types. Floating types carry gradients; integer types hold labels and indices.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace freight {

enum class DType : uint8_t { F32, F64, BF16, I32, I64, U8 };

size_t dtype_size(DType t);
const char* dtype_name(DType t);  // "float32", "float64", "bfloat16", "int32", "int64", "uint8"
bool is_floating(DType t);
DType parse_dtype(const std::string& name);  // accepts the names above and f32/f64/bf16/...

template <class T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() { return DType::F32; }
template <>
constexpr DType dtype_of<double>() { return DType::F64; }
template <>
constexpr DType dtype_of<int32_t>() { return DType::I32; }
template <>
constexpr DType dtype_of<int64_t>() { return DType::I64; }
template <>
constexpr DType dtype_of<uint8_t>() { return DType::U8; }

}  // namespace freight
