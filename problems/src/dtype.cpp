#include "atrex/problems/dtype.h"

#include <fmt/format.h>

namespace atrex::problems {

std::string_view dtype_name(DType d) {
  switch (d) {
    case DType::kBF16: return "bf16";
    case DType::kF16: return "fp16";
    case DType::kF32: return "fp32";
    case DType::kF64: return "fp64";
    case DType::kI32: return "int32";
    case DType::kI64: return "int64";
    case DType::kU8: return "uint8";
    case DType::kFP8E4M3: return "fp8_e4m3";
    case DType::kBool: return "bool";
  }
  return "?";
}

Result<DType> parse_dtype(std::string_view n) {
  if (n == "bf16" || n == "bfloat16") return DType::kBF16;
  if (n == "fp16" || n == "float16" || n == "half") return DType::kF16;
  if (n == "fp32" || n == "float32" || n == "float") return DType::kF32;
  if (n == "fp64" || n == "float64" || n == "double") return DType::kF64;
  if (n == "int32") return DType::kI32;
  if (n == "int64") return DType::kI64;
  if (n == "uint8") return DType::kU8;
  if (n == "fp8_e4m3" || n == "float8_e4m3fn") return DType::kFP8E4M3;
  if (n == "bool") return DType::kBool;
  return invalid_input(fmt::format("unknown dtype \"{}\"", n));
}

size_t dtype_size(DType d) {
  switch (d) {
    case DType::kBF16:
    case DType::kF16: return 2;
    case DType::kF32:
    case DType::kI32: return 4;
    case DType::kF64:
    case DType::kI64: return 8;
    case DType::kU8:
    case DType::kFP8E4M3:
    case DType::kBool: return 1;
  }
  return 1;
}

bool dtype_is_float(DType d) {
  return d == DType::kBF16 || d == DType::kF16 || d == DType::kF32 || d == DType::kF64 ||
         d == DType::kFP8E4M3;
}

DLDataType dl_data_type(DType d) {
  switch (d) {
    case DType::kBF16: return {kDLBfloat, 16, 1};
    case DType::kF16: return {kDLFloat, 16, 1};
    case DType::kF32: return {kDLFloat, 32, 1};
    case DType::kF64: return {kDLFloat, 64, 1};
    case DType::kI32: return {kDLInt, 32, 1};
    case DType::kI64: return {kDLInt, 64, 1};
    case DType::kU8:
    case DType::kBool: return {kDLUInt, 8, 1};
    case DType::kFP8E4M3: return {ATREX_DL_FLOAT8_E4M3FN, 8, 1};
  }
  ATREX_UNREACHABLE("DType");
}

}  // namespace atrex::problems
