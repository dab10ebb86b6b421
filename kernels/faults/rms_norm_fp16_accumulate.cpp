// A cheating rms_norm candidate for the cpu backend (test fixture of the range probe): it
// computes in fp16 (_Float16) where the operator's policy is fp32 — the squares, 32 lane
// partial sums reduced as a tree (as a warp would), the mean and the scaling. fp16 has more
// mantissa than bf16, so on the usual inputs (x ~ 0.02 randn) it passes; on the range probe's
// inputs (x * 2^11) the row sums pass 65504, become inf, and the rows come out as zeros.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "atrex/candidate.h"

namespace {

float bf16_to_float(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

constexpr int kLanes = 32;

}  // namespace

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* x = atrex_input(launch, "x");
  const DLTensor* w = atrex_input(launch, "weight");
  const DLTensor* out = atrex_output(launch, "out");
  if (!x || !w || !out || x->ndim != 2) return 1;
  const int64_t rows = x->shape[0], hidden = x->shape[1];
  const _Float16 eps = static_cast<_Float16>(atrex_param_float(launch, "eps", 1e-6));
  const auto* xs = static_cast<const uint16_t*>(x->data);
  const auto* ws = static_cast<const uint16_t*>(w->data);
  auto* os = static_cast<uint16_t*>(out->data);
  for (int64_t r = 0; r < rows; ++r) {
    _Float16 lane[kLanes] = {};
    for (int64_t h = 0; h < hidden; ++h) {
      const _Float16 v = static_cast<_Float16>(bf16_to_float(xs[r * hidden + h]));
      lane[h % kLanes] += v * v;
    }
    for (int width = kLanes / 2; width > 0; width /= 2) {
      for (int l = 0; l < width; ++l) lane[l] += lane[l + width];
    }
    const _Float16 mean = lane[0] / static_cast<_Float16>(hidden);
    const _Float16 inv = static_cast<_Float16>(1.0f / std::sqrt(static_cast<float>(mean + eps)));
    for (int64_t h = 0; h < hidden; ++h) {
      const _Float16 v = static_cast<_Float16>(bf16_to_float(xs[r * hidden + h]));
      const _Float16 y = v * inv * static_cast<_Float16>(bf16_to_float(ws[h]));
      os[r * hidden + h] = float_to_bf16(static_cast<float>(y));
    }
  }
  return 0;
}
