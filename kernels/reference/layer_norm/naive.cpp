// Reference re-expressed as a cpu candidate: layer_norm.
// x [..., H] bf16, weight, bias [H] bf16 -> out = bf16(((x - mean) * rsqrt(var + 1e-5)) * w + b)
// per row of the last dim (biased variance), fp32 output arithmetic.
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

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* x = atrex_input(launch, "x");
  const DLTensor* weight = atrex_input(launch, "weight");
  const DLTensor* bias = atrex_input(launch, "bias");
  const DLTensor* out = atrex_output(launch, "out");
  if (!x || !weight || !bias || !out || weight->ndim != 1) return 1;
  const int64_t hidden = weight->shape[0], rows = atrex_numel(x) / hidden;
  const auto* xs = static_cast<const uint16_t*>(x->data);
  const auto* ws = static_cast<const uint16_t*>(weight->data);
  const auto* bs = static_cast<const uint16_t*>(bias->data);
  auto* os = static_cast<uint16_t*>(out->data);
  for (int64_t r = 0; r < rows; ++r) {
    const uint16_t* xr = xs + r * hidden;
    double sum = 0;
    for (int64_t h = 0; h < hidden; ++h) sum += bf16_to_float(xr[h]);
    const double mean = sum / static_cast<double>(hidden);
    double m2 = 0;
    for (int64_t h = 0; h < hidden; ++h)
      m2 += (bf16_to_float(xr[h]) - mean) * (bf16_to_float(xr[h]) - mean);
    const float rstd =
        1.0f / std::sqrt(static_cast<float>(m2 / static_cast<double>(hidden)) + 1e-5f);
    const float meanf = static_cast<float>(mean);
    for (int64_t h = 0; h < hidden; ++h) {
      os[r * hidden + h] = float_to_bf16(
          ((bf16_to_float(xr[h]) - meanf) * rstd) * bf16_to_float(ws[h]) + bf16_to_float(bs[h]));
    }
  }
  return 0;
}
