// Element types of operator tensors, named as in Atrex-Bench metadata ("bf16", "fp32", ...).
#pragma once

#include <cstddef>
#include <string_view>

#include "atrex/candidate.h"
#include "atrex/common/error.h"

namespace atrex::problems {

enum class DType { kBF16, kF16, kF32, kF64, kI32, kI64, kU8, kFP8E4M3, kBool };

// "bf16", "fp16", "fp32", "fp64", "int32", "int64", "uint8", "fp8_e4m3", "bool".
std::string_view dtype_name(DType d);
// Accepts the names above and the torch spellings ("bfloat16", "float16", "float32").
Result<DType> parse_dtype(std::string_view name);
// Bytes per element.
size_t dtype_size(DType d);
bool dtype_is_float(DType d);
// The DLPack element type a candidate receives for `d` (atrex/candidate.h lists the mapping;
// bool travels as uint8).
DLDataType dl_data_type(DType d);

}  // namespace atrex::problems
