// Reference re-expressed as a cpu candidate: fp8_dynamic_per_token_quant.
// x [T, H] bf16 -> q [T, H] fp8 e4m3fn, scale [T] fp32: scale = max(amax|row|, 1e-12) * fl(1/240)
// (the float8_e4m3fnuz range of the Atrex reference), q = fp8(clamp(x * fl(1/scale), -240, 240)).
#include <cmath>
#include <cstring>

#include "atrex/candidate.h"

static float bf16_to_float(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round to nearest even onto the e4m3fn grid (inputs are clamped to +-448 before).
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
  const DLTensor* q = atrex_output(launch, "q");
  const DLTensor* scale = atrex_output(launch, "scale");
  if (!x || !q || !scale || x->ndim != 2) return 1;
  const int64_t rows = x->shape[0], hidden = x->shape[1];
  const auto* xs = static_cast<const uint16_t*>(x->data);
  auto* qs = static_cast<uint8_t*>(q->data);
  auto* ss = static_cast<float*>(scale->data);
  for (int64_t r = 0; r < rows; ++r) {
    const uint16_t* xr = xs + r * hidden;
    float amax = 0.0f;
    for (int64_t h = 0; h < hidden; ++h) amax = std::fmax(amax, std::fabs(bf16_to_float(xr[h])));
    const float s = std::fmax(amax, 1e-12f) * (1.0f / 240.0f);
    const float inv = 1.0f / s;
    for (int64_t h = 0; h < hidden; ++h) {
      qs[r * hidden + h] =
          float_to_fp8(std::fmin(std::fmax(bf16_to_float(xr[h]) * inv, -240.0f), 240.0f));
    }
    ss[r] = s;
  }
  return 0;
}
