// Reference re-expressed as a cpu candidate: fused_rmsnorm_quant.
// residual_out = bf16(x + residual); normed = bf16(bf16(r * rsqrt(mean(r^2) + eps)) * weight);
// scale [T, 1] = amax|normed| * fl(1/240) (1 where 0); quantized = fp8 e4m3fn(normed / scale).
#include <cmath>
#include <cstring>

#include "atrex/candidate.h"

static float bf16_to_float(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round to nearest even (inputs here are finite).
static uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
static float round_bf16(float f) { return bf16_to_float(float_to_bf16(f)); }

// Round to nearest even onto the e4m3fn grid (inputs stay within +-448 here).
static uint8_t float_to_fp8(float f) {
  const uint8_t sign = std::signbit(f) ? 0x80 : 0;
  const float a = std::fabs(f);
  if (a < 0.015625f)
    return static_cast<uint8_t>(sign | static_cast<uint8_t>(std::nearbyint(a * 512.0f)));
  int e;
  std::frexp(a, &e);  // a in [2^(e-1), 2^e)
  const float step = std::ldexp(1.0f, e - 4);
  const float r = std::nearbyint(a / step) * step;  // may carry into the next binade
  std::frexp(r, &e);
  const uint32_t exp_field = static_cast<uint32_t>(e - 1 + 7);
  const uint32_t man = static_cast<uint32_t>(std::ldexp(r, -(e - 1)) * 8.0f) - 8u;
  return static_cast<uint8_t>(sign | (exp_field << 3) | man);
}

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* x = atrex_input(launch, "x");
  const DLTensor* residual = atrex_input(launch, "residual");
  const DLTensor* weight = atrex_input(launch, "weight");
  const DLTensor* q = atrex_output(launch, "quantized");
  const DLTensor* scale = atrex_output(launch, "scale");
  const DLTensor* residual_out = atrex_output(launch, "residual_out");
  if (!x || !residual || !weight || !q || !scale || !residual_out || x->ndim != 2) return 1;
  const int64_t rows = x->shape[0], hidden = x->shape[1];
  const float eps = static_cast<float>(atrex_param_float(launch, "eps", 1e-5));
  const auto* xs = static_cast<const uint16_t*>(x->data);
  const auto* rs = static_cast<const uint16_t*>(residual->data);
  const auto* ws = static_cast<const uint16_t*>(weight->data);
  auto* qs = static_cast<uint8_t*>(q->data);
  auto* ss = static_cast<float*>(scale->data);
  auto* ro = static_cast<uint16_t*>(residual_out->data);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t base = r * hidden;
    double sum_sq = 0;
    for (int64_t h = 0; h < hidden; ++h) {
      const float v = round_bf16(bf16_to_float(xs[base + h]) + bf16_to_float(rs[base + h]));
      ro[base + h] = float_to_bf16(v);
      sum_sq += static_cast<double>(v) * v;
    }
    const float rstd =
        1.0f / std::sqrt(static_cast<float>(sum_sq / static_cast<double>(hidden)) + eps);
    auto normed = [&](int64_t h) {
      return round_bf16(round_bf16(bf16_to_float(ro[base + h]) * rstd) * bf16_to_float(ws[h]));
    };
    float amax = 0.0f;
    for (int64_t h = 0; h < hidden; ++h) amax = std::fmax(amax, std::fabs(normed(h)));
    float s = amax * (1.0f / 240.0f);
    if (s == 0.0f) s = 1.0f;
    for (int64_t h = 0; h < hidden; ++h) qs[base + h] = float_to_fp8(normed(h) / s);
    ss[r] = s;
  }
  return 0;
}
