// ATTACKS the runner's time (a slot held for nothing): a correct rms_norm whose process never
// exits. A static object's destructor, run by exit() after the child wrote its last record,
// parks the child for good. Before 2026-12-07 the runner waited out the whole shape limit for it
// (every such task cost shape_timeout_s of the runner's slot); now it kills a child that lingers
// kChildExitGraceMs past its last record, and keeps the records.
//   ATTACK_HANG 0: the honest twin (the same destructor returns at once).
#ifndef ATTACK_HANG
#define ATTACK_HANG 1
#endif
#include <unistd.h>
#include <cmath>
#include <cstring>

#include "atrex/candidate.h"

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

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
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

namespace {
struct ParkAtExit {
  ~ParkAtExit() {
    if (ATTACK_HANG)
      for (;;) ::pause();
  }
};
ParkAtExit park_at_exit;
}  // namespace
