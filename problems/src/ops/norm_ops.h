// Row-wise normalisation references: rms_norm, fused_add_rms_norm, l2_norm.
// Semantics of alibaba/atrex-bench data/<op>/reference.py (read 2026-11-30): inputs are bf16,
// arithmetic is fp32 (x.float()), and every tensor op that produces a bf16 tensor rounds there.
// We accumulate the sum of squares in fp64 (a reference should not be less exact than torch).
#pragma once

#include <cstdint>

#include "atrex/problems/numeric.h"
#include "atrex/problems/operator.h"

namespace atrex::problems::ops {

// out = bf16((x * rsqrt(mean(x^2) + eps)) * w), x: [T, H], w: [H].
struct RmsNormRow {
  const uint16_t* x;
  const uint16_t* w;
  uint16_t* out;
  int64_t hidden;
  float eps;
  ATREX_HD void operator()(int64_t row) const {
    const uint16_t* xr = x + row * hidden;
    double ss = 0;
    for (int64_t h = 0; h < hidden; ++h) {
      double v = num::bf16_to_float(xr[h]);
      ss += v * v;
    }
    const float r = 1.0f / sqrtf(static_cast<float>(ss / static_cast<double>(hidden)) + eps);
    for (int64_t h = 0; h < hidden; ++h) {
      out[row * hidden + h] =
          num::float_to_bf16((num::bf16_to_float(xr[h]) * r) * num::bf16_to_float(w[h]));
    }
  }
};

// residual_out = bf16(x + residual); out = bf16((residual_out * rsqrt(mean(residual_out^2) + eps))
// * w).
struct FusedAddRmsNormRow {
  const uint16_t* x;
  const uint16_t* residual;
  const uint16_t* w;
  uint16_t* out;
  uint16_t* residual_out;
  int64_t hidden;
  float eps;
  ATREX_HD void operator()(int64_t row) const {
    const int64_t base = row * hidden;
    double ss = 0;
    for (int64_t h = 0; h < hidden; ++h) {
      const float r =
          num::round_bf16(num::bf16_to_float(x[base + h]) + num::bf16_to_float(residual[base + h]));
      residual_out[base + h] = num::float_to_bf16(r);
      ss += static_cast<double>(r) * r;
    }
    const float inv = 1.0f / sqrtf(static_cast<float>(ss / static_cast<double>(hidden)) + eps);
    for (int64_t h = 0; h < hidden; ++h) {
      out[base + h] = num::float_to_bf16((num::bf16_to_float(residual_out[base + h]) * inv) *
                                         num::bf16_to_float(w[h]));
    }
  }
};

// out = bf16(x * rsqrt(sum(x^2) + eps)).
struct L2NormRow {
  const uint16_t* x;
  uint16_t* out;
  int64_t hidden;
  float eps;
  ATREX_HD void operator()(int64_t row) const {
    const uint16_t* xr = x + row * hidden;
    double ss = 0;
    for (int64_t h = 0; h < hidden; ++h) {
      double v = num::bf16_to_float(xr[h]);
      ss += v * v;
    }
    const float r = 1.0f / sqrtf(static_cast<float>(ss) + eps);
    for (int64_t h = 0; h < hidden; ++h)
      out[row * hidden + h] = num::float_to_bf16(num::bf16_to_float(xr[h]) * r);
  }
};

template <class Exec>
void rms_norm_reference(const Exec& ex, const ResolvedShape& s, const void* const* in,
                        void* const* out) {
  RmsNormRow f{static_cast<const uint16_t*>(in[0]), static_cast<const uint16_t*>(in[1]),
               static_cast<uint16_t*>(out[0]), s.int_param("hidden_size"),
               static_cast<float>(s.float_param("eps"))};
  ex.for_each(s.int_param("token_count"), f);
}

template <class Exec>
void fused_add_rms_norm_reference(const Exec& ex, const ResolvedShape& s, const void* const* in,
                                  void* const* out) {
  FusedAddRmsNormRow f{static_cast<const uint16_t*>(in[0]),     static_cast<const uint16_t*>(in[1]),
                       static_cast<const uint16_t*>(in[2]),     static_cast<uint16_t*>(out[0]),
                       static_cast<uint16_t*>(out[1]),          s.int_param("hidden_size"),
                       static_cast<float>(s.float_param("eps"))};
  ex.for_each(s.int_param("token_count"), f);
}

template <class Exec>
void l2_norm_reference(const Exec& ex, const ResolvedShape& s, const void* const* in,
                       void* const* out) {
  L2NormRow f{static_cast<const uint16_t*>(in[0]), static_cast<uint16_t*>(out[0]),
              s.int_param("hidden_size"), static_cast<float>(s.float_param("eps"))};
  ex.for_each(s.int_param("num_tokens"), f);
}

}  // namespace atrex::problems::ops
