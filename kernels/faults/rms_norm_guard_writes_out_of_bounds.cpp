// Fault candidate (issue 14, attack 8; docs/evaluation.md "Guard regions"): a correct rms_norm
// (as rms_norm_correct.cpp) that also writes ATTACK_OVERRUN elements past the end of its output
// (the output's last values repeated), or, with ATTACK_BEFORE 1, that many elements before its
// start; with ATTACK_AFTER_CALLS N only from its (N+1)-th call on (past the checked calls and
// the warm-up: the first timed call). The values it writes in bounds are right, so without guard
// regions it passed every shape; a write of 1 to 7 elements out of bounds must now be
// `rejected`, the note naming the output and the side (and the timed call, for the last).
#include <cmath>
#include <cstring>

#include "atrex/candidate.h"

#define ATTACK_OVERRUN 1
#define ATTACK_BEFORE 0
#define ATTACK_AFTER_CALLS 0

static int g_calls = 0;

static float bf16_to_float(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

static uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

static int compute(const AtrexLaunch* launch) {
  const DLTensor* x = atrex_input(launch, "x");
  const DLTensor* w = atrex_input(launch, "weight");
  const DLTensor* out = atrex_output(launch, "out");
  if (!x || !w || !out || x->ndim != 2) return 1;
  const int64_t rows = x->shape[0], hidden = x->shape[1];
  const float eps = static_cast<float>(atrex_param_float(launch, "eps", 1e-6));
  const auto* xs = static_cast<const uint16_t*>(x->data);
  const auto* ws = static_cast<const uint16_t*>(w->data);
  auto* os = static_cast<uint16_t*>(out->data);
  for (int64_t r = 0; r < rows; ++r) {
    float ss = 0;
    for (int64_t h = 0; h < hidden; ++h) {
      const float v = bf16_to_float(xs[r * hidden + h]);
      ss += v * v;
    }
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(hidden) + eps);
    for (int64_t h = 0; h < hidden; ++h) {
      os[r * hidden + h] =
          float_to_bf16(bf16_to_float(xs[r * hidden + h]) * inv * bf16_to_float(ws[h]));
    }
  }
  return 0;
}

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const int rc = compute(launch);
  if (rc != 0) return rc;
  if (g_calls++ < ATTACK_AFTER_CALLS) return 0;
  const DLTensor* out = atrex_output(launch, "out");
  const int64_t n = out->shape[0] * out->shape[1];
  auto* os = static_cast<uint16_t*>(out->data);
  for (int64_t k = 0; k < ATTACK_OVERRUN; ++k) {
    if (ATTACK_BEFORE)
      os[-1 - k] = os[k % n];
    else
      os[n + k] = os[n - 1 - k % n];
  }
  return 0;
}
