// Input generation functor shared by the CPU and CUDA backends (counter-based: the value of
// element i depends only on (seed, tensor stream, i), not on threads or launch shape).
#pragma once

#include <cstdint>

#include "atrex/problems/dtype.h"
#include "atrex/problems/numeric.h"

namespace atrex::problems {

// Element-type codes for device code (mirrors DType's order).
enum GenDType : int {
  kGenBF16 = 0,
  kGenF16 = 1,
  kGenF32 = 2,
  kGenF64 = 3,
  kGenI32 = 4,
  kGenI64 = 5,
  kGenFP8 = 6,
  kGenU8 = 7
};

inline int gen_dtype(DType d) {
  switch (d) {
    case DType::kBF16: return kGenBF16;
    case DType::kF16: return kGenF16;
    case DType::kF32: return kGenF32;
    case DType::kF64: return kGenF64;
    case DType::kI32: return kGenI32;
    case DType::kI64: return kGenI64;
    case DType::kFP8E4M3: return kGenFP8;
    case DType::kU8:
    case DType::kBool: return kGenU8;
  }
  return -1;
}

struct GenerateFn {
  int kind;  // Distribution::Kind
  float scale;
  float offset;
  double lo;
  double hi;
  int dtype;  // GenDType
  void* data;
  uint64_t seed;
  uint64_t stream;
  // The range probe's power of two (operator.h RangeProbe), applied to the drawn value after
  // its roundings: exact while it stays in range, so the probe set is the usual draw, scaled.
  float multiplier = 1.0f;

  // Rounds to the tensor's element type, as a tensor op producing that dtype would.
  ATREX_HD float round_to(float v) const {
    if (dtype == kGenBF16) return num::round_bf16(v);
    if (dtype == kGenF16) return num::round_fp16(v);
    if (dtype == kGenFP8) return num::round_fp8e4m3(v);
    return v;
  }

  ATREX_HD void operator()(int64_t i) const {
    double value;
    if (kind == 0) {
      float v = round_to(
          static_cast<float>(num::standard_normal(seed, stream, static_cast<uint64_t>(i))));
      if (scale != 1.0f) v = round_to(v * scale);
      if (offset != 0.0f) v = round_to(v + offset);
      value = v;
    } else {
      value = lo + (hi - lo) * (1.0 - num::uniform_open0(seed, stream, static_cast<uint64_t>(i)));
    }
    // Integer and fp8 tensors are never scaled (the operator definitions are checked for it).
    if (multiplier != 1.0f && dtype <= kGenF64) value *= multiplier;
    switch (dtype) {
      case kGenBF16:
        static_cast<uint16_t*>(data)[i] = num::float_to_bf16(static_cast<float>(value));
        break;
      case kGenF16:
        static_cast<uint16_t*>(data)[i] = num::float_to_fp16(static_cast<float>(value));
        break;
      case kGenF32: static_cast<float*>(data)[i] = static_cast<float>(value); break;
      case kGenF64: static_cast<double*>(data)[i] = value; break;
      case kGenI32: static_cast<int32_t*>(data)[i] = static_cast<int32_t>(floor(value)); break;
      case kGenI64: static_cast<int64_t*>(data)[i] = static_cast<int64_t>(floor(value)); break;
      case kGenFP8:
        static_cast<uint8_t*>(data)[i] = num::float_to_fp8e4m3(static_cast<float>(value));
        break;
      case kGenU8: static_cast<uint8_t*>(data)[i] = static_cast<uint8_t>(floor(value)); break;
      default: break;
    }
  }
};

}  // namespace atrex::problems
