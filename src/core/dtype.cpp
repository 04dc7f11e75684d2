#include "freight/dtype.h"

#include "freight/error.h"

namespace freight {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F64: return 8;
    case DType::BF16: return 2;
    case DType::I32: return 4;
    case DType::I64: return 8;
    case DType::U8: return 1;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "float32";
    case DType::F64: return "float64";
    case DType::BF16: return "bfloat16";
    case DType::I32: return "int32";
    case DType::I64: return "int64";
    case DType::U8: return "uint8";
  }
  return "?";
}

bool is_floating(DType t) { return t == DType::F32 || t == DType::F64 || t == DType::BF16; }

DType parse_dtype(const std::string& n) {
  if (n == "float32" || n == "f32" || n == "fp32") return DType::F32;
  if (n == "float64" || n == "f64" || n == "fp64") return DType::F64;
  if (n == "bfloat16" || n == "bf16") return DType::BF16;
  if (n == "int32" || n == "i32") return DType::I32;
  if (n == "int64" || n == "i64") return DType::I64;
  if (n == "uint8" || n == "u8") return DType::U8;
  throw Error("unknown dtype '" + n + "' (expected float32, float64, bfloat16, int32, int64, uint8)");
}

}  // namespace freight
