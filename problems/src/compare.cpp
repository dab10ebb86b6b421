#include "atrex/problems/compare.h"

#include <cmath>

#include <fmt/format.h>

#include "atrex/problems/numeric.h"

namespace atrex::problems {

using problems::DType;

double element_as_double(DType dtype, const void* data, int64_t i) {
  switch (dtype) {
    case DType::kBF16: return num::bf16_to_float(static_cast<const uint16_t*>(data)[i]);
    case DType::kF16: return num::fp16_to_float(static_cast<const uint16_t*>(data)[i]);
    case DType::kF32: return static_cast<const float*>(data)[i];
    case DType::kF64: return static_cast<const double*>(data)[i];
    case DType::kI32: return static_cast<const int32_t*>(data)[i];
    case DType::kI64: return static_cast<double>(static_cast<const int64_t*>(data)[i]);
    case DType::kFP8E4M3: return num::fp8e4m3_to_float(static_cast<const uint8_t*>(data)[i]);
    case DType::kU8:
    case DType::kBool: return static_cast<const uint8_t*>(data)[i];
  }
  return 0;
}

namespace {

std::string coords(const TensorDesc& d, int64_t i) {
  std::string s;
  for (size_t k = d.dims.size(); k-- > 0;) {
    s = fmt::format("{}{}", i % d.dims[k], s.empty() ? "" : ", " + s);
    i /= d.dims[k];
  }
  return s;
}

}  // namespace

bool is_integer_dtype(DType d) {
  return d == DType::kI32 || d == DType::kI64 || d == DType::kU8 || d == DType::kBool;
}

ReferenceSignal reference_signal(DType dtype, const void* ref, int64_t n, double atol, double rtol) {
  ReferenceSignal s;
  s.integer = is_integer_dtype(dtype);
  bool zero_passes = !s.integer;
  for (int64_t i = 0; i < n; ++i) {
    const double r = element_as_double(dtype, ref, i);
    if (!std::isfinite(r)) continue;
    ++s.finite;
    s.ref_max = std::max(s.ref_max, std::fabs(r));
    s.sum_sq += r * r;
    if (std::fabs(r) > atol + rtol * std::fabs(r)) zero_passes = false;
  }
  s.zero_passes = zero_passes && n > 0;
  s.low_signal = !s.integer && n > 0 && is_low_signal(s.zero_passes, s.ref_max, atol);
  return s;
}

CompareResult compare_output(const TensorDesc& desc, const void* cand, const void* ref, double atol,
                             double rtol) {
  CompareResult res;
  const int64_t n = desc.numel();
  const ReferenceSignal sig = reference_signal(desc.dtype, ref, n, atol, rtol);
  const bool integer = sig.integer;
  res.low_signal = sig.low_signal;
  const double abs_tol = res.low_signal ? atol * sig.ref_max : atol;
  for (int64_t i = 0; i < n; ++i) {
    const double c = element_as_double(desc.dtype, cand, i);
    const double r = element_as_double(desc.dtype, ref, i);
    bool ok;
    std::string why;
    if (integer) {
      ok = c == r;
    } else if (std::isnan(r)) {
      ok = std::isnan(c);
    } else if (std::isinf(r)) {
      ok = c == r;
      why = "reference is infinite here and must be matched exactly";
    } else if (!std::isfinite(c)) {
      ok = false;
      why = "non-finite output where the reference is finite";
    } else {
      const double diff = std::fabs(c - r);
      res.max_abs_error = std::max(res.max_abs_error, diff);
      if (r != 0) res.max_rel_error = std::max(res.max_rel_error, diff / std::fabs(r));
      const double tol = abs_tol + rtol * std::fabs(r);
      ok = diff <= tol;
      if (!ok)
        why = fmt::format(
            "|diff| {:.4g} > {:.4g}{}", diff, tol,
            res.low_signal ? " (low-signal output: tolerance relative to max|ref|)" : "");
    }
    if (!ok) {
      if (res.bad_count == 0) {
        res.message = fmt::format("{}[{}]: got {}, expected {}{}{}", desc.name, coords(desc, i), c,
                                  r, why.empty() ? "" : "; ", why);
      }
      ++res.bad_count;
    }
  }
  if (res.bad_count > 0) {
    res.pass = false;
    res.message += fmt::format(" ({} of {} elements wrong)", res.bad_count, n);
  }
  return res;
}

}  // namespace atrex::problems
