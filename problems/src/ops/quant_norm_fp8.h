// fp8 e4m3 quantisation references: fp8_dynamic_per_token_quant, per_token_group_quant_fp8,
// fused_rmsnorm_quant. Semantics of alibaba/atrex-bench data/<op>/reference.py (read
// 2026-11-30), modelling torch on CUDA step by step:
//  * `tensor / python_scalar` is computed as tensor * fl32(1 / scalar) (div_true_kernel_cuda
//    multiplies by the reciprocal when the divisor is a CPU scalar), `tensor / tensor` divides;
//  * fp8 casts round to nearest even (num::float_to_fp8e4m3, c10 semantics).
// Where a reference names torch.float8_e4m3fnuz (AMD's format, max 240), atrex keeps its
// range (scale = amax / 240) but stores OCP e4m3fn, the only fp8 type of the candidate ABI:
// both formats hold the same values for magnitudes >= 2^-6; below that fn's step is 2^-9
// where fnuz's is 2^-10, a difference of less than one fn step.
#pragma once

#include <cstdint>

#include "atrex/problems/numeric.h"
#include "atrex/problems/operator.h"

namespace atrex::problems::ops {

constexpr float kFp8FnuzMax = 240.0f;  // torch.finfo(torch.float8_e4m3fnuz).max
constexpr float kFp8FnMax = 448.0f;    // torch.finfo(torch.float8_e4m3fn).max

ATREX_HD float qn_clamp(float v, float lo, float hi) { return fminf(fmaxf(v, lo), hi); }

// x: [T, H] bf16 -> q: [T, H] fp8, scale: [T] fp32.
// scale = max(amax|x_row|, 1e-12) * fl(1/240); q = fp8(clamp(x * fl(1/scale), -240, 240)).
struct Fp8DynamicPerTokenQuantRow {
  const uint16_t* x;
  uint8_t* q;
  float* scale;
  int64_t hidden;
  ATREX_HD void operator()(int64_t row) const {
    const uint16_t* xr = x + row * hidden;
    float amax = 0.0f;
    for (int64_t h = 0; h < hidden; ++h) amax = fmaxf(amax, fabsf(num::bf16_to_float(xr[h])));
    const float s = fmaxf(amax, 1e-12f) * (1.0f / kFp8FnuzMax);
    const float inv = 1.0f / s;
    for (int64_t h = 0; h < hidden; ++h) {
      q[row * hidden + h] = num::float_to_fp8e4m3(
          qn_clamp(num::bf16_to_float(xr[h]) * inv, -kFp8FnuzMax, kFp8FnuzMax));
    }
    scale[row] = s;
  }
};

// x: [T, H] bf16 viewed as [T * H / G, G] groups -> quantized: [T, H] fp8, scales: [T, H / G].
// scales = max(amax|group| * fl(1/448), 1e-10); quantized = fp8(clamp(x / scale, -448, 448)).
// The reference takes fnuz with max 224 only under ROCm; on CUDA it is e4m3fn with 448.
struct PerTokenGroupQuantFp8Group {
  const uint16_t* x;
  uint8_t* q;
  float* scales;
  int64_t group_size;
  ATREX_HD void operator()(int64_t group) const {
    const int64_t base = group * group_size;
    float amax = 0.0f;
    for (int64_t j = 0; j < group_size; ++j)
      amax = fmaxf(amax, fabsf(num::bf16_to_float(x[base + j])));
    const float s = fmaxf(amax * (1.0f / kFp8FnMax), 1e-10f);
    for (int64_t j = 0; j < group_size; ++j) {
      q[base + j] = num::float_to_fp8e4m3(
          qn_clamp(num::bf16_to_float(x[base + j]) / s, -kFp8FnMax, kFp8FnMax));
    }
    scales[group] = s;
  }
};

// x, residual: [T, H] bf16, weight: [H] bf16 -> quantized: [T, H] fp8, scale: [T, 1] fp32,
// residual_out: [T, H] bf16.
//   residual_out = bf16(x + residual)
//   normed = bf16(bf16(r * rsqrt(mean(r^2) + eps)) * weight)   (F.rms_norm, ATen composite)
//   scale = amax|normed| * fl(1/240), 1 where that is 0; quantized = fp8(normed / scale).
// No clamp: |normed / scale| <= 240 up to an ulp, which rounds to 240.
struct FusedRmsNormQuantRow {
  const uint16_t* x;
  const uint16_t* residual;
  const uint16_t* weight;
  uint8_t* q;
  float* scale;
  uint16_t* residual_out;
  int64_t hidden;
  float eps;
  ATREX_HD float normed(int64_t base, int64_t h, float rstd) const {
    const float r = num::bf16_to_float(residual_out[base + h]);
    return num::round_bf16(num::round_bf16(r * rstd) * num::bf16_to_float(weight[h]));
  }
  ATREX_HD void operator()(int64_t row) const {
    const int64_t base = row * hidden;
    double ss = 0;
    for (int64_t h = 0; h < hidden; ++h) {
      const float r =
          num::round_bf16(num::bf16_to_float(x[base + h]) + num::bf16_to_float(residual[base + h]));
      residual_out[base + h] = num::float_to_bf16(r);
      ss += static_cast<double>(r) * r;
    }
    const float rstd = 1.0f / sqrtf(static_cast<float>(ss / static_cast<double>(hidden)) + eps);
    float amax = 0.0f;
    for (int64_t h = 0; h < hidden; ++h) amax = fmaxf(amax, fabsf(normed(base, h, rstd)));
    float s = amax * (1.0f / kFp8FnuzMax);
    if (s == 0.0f) s = 1.0f;
    for (int64_t h = 0; h < hidden; ++h)
      q[base + h] = num::float_to_fp8e4m3(normed(base, h, rstd) / s);
    scale[row] = s;
  }
};

template <class Exec>
void fp8_dynamic_per_token_quant_reference(const Exec& ex, const ResolvedShape& s,
                                           const void* const* in, void* const* out) {
  Fp8DynamicPerTokenQuantRow f{static_cast<const uint16_t*>(in[0]), static_cast<uint8_t*>(out[0]),
                               static_cast<float*>(out[1]), s.int_param("hidden_size")};
  ex.for_each(s.int_param("token_count"), f);
}

template <class Exec>
void per_token_group_quant_fp8_reference(const Exec& ex, const ResolvedShape& s,
                                         const void* const* in, void* const* out) {
  const int64_t group_size = s.int_param("group_size");
  PerTokenGroupQuantFp8Group f{static_cast<const uint16_t*>(in[0]), static_cast<uint8_t*>(out[0]),
                               static_cast<float*>(out[1]), group_size};
  ex.for_each(s.inputs[0].numel() / group_size, f);
}

template <class Exec>
void fused_rmsnorm_quant_reference(const Exec& ex, const ResolvedShape& s, const void* const* in,
                                   void* const* out) {
  FusedRmsNormQuantRow f{
      static_cast<const uint16_t*>(in[0]), static_cast<const uint16_t*>(in[1]),
      static_cast<const uint16_t*>(in[2]), static_cast<uint8_t*>(out[0]),
      static_cast<float*>(out[1]),         static_cast<uint16_t*>(out[2]),
      s.int_param("hidden_size"),          static_cast<float>(s.float_param("eps"))};
  ex.for_each(s.int_param("token_count"), f);
}

}  // namespace atrex::problems::ops
