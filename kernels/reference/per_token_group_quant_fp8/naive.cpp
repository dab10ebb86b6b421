// Reference re-expressed as a cpu candidate: per_token_group_quant_fp8.
// x [T, H] bf16 in groups of group_size -> quantized [T, H] fp8 e4m3fn, scales [T, H / G] fp32:
// scale = max(amax|group| * fl(1/448), 1e-10), quantized = fp8(clamp(x / scale, -448, 448)).
#include <cmath>
#include <cstring>

#include "atrex/candidate.h"

static float bf16_to_float(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

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
  const DLTensor* q = atrex_output(launch, "quantized");
  const DLTensor* scales = atrex_output(launch, "scales");
  const int64_t group = atrex_param_int(launch, "group_size", 0);
  if (!x || !q || !scales || group <= 0 || atrex_numel(x) % group != 0) return 1;
  const int64_t groups = atrex_numel(x) / group;
  const auto* xs = static_cast<const uint16_t*>(x->data);
  auto* qs = static_cast<uint8_t*>(q->data);
  auto* ss = static_cast<float*>(scales->data);
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t base = g * group;
    float amax = 0.0f;
    for (int64_t j = 0; j < group; ++j)
      amax = std::fmax(amax, std::fabs(bf16_to_float(xs[base + j])));
    const float s = std::fmax(amax * (1.0f / 448.0f), 1e-10f);
    for (int64_t j = 0; j < group; ++j) {
      qs[base + j] =
          float_to_fp8(std::fmin(std::fmax(bf16_to_float(xs[base + j]) / s, -448.0f), 448.0f));
    }
    ss[g] = s;
  }
  return 0;
}
