// ATTACKS the judge's look at the inputs (attack round 7, 2026-12-07): a correct rms_norm that
// also writes its result back into its input x, on calls the judge was expected not to look at.
// The inputs used to go to the judge with every check; since 9c9eb21 only a shape's first check
// and the first after its timed calls carried them, and both of these passed:
//   ATTACK_MODE 1: every checked call but each shape's first, before the shape's timed calls
//     (the correctness seeds, the range probe);
//   ATTACK_MODE 2: every timed call (a timed call's x is a window into a buffer twice its size,
//     so its pointer differs from the checked calls'), caught then only at the last one.
// Expected now: `wrong_result` ("modified its input x"): the judge asks for the inputs after a
// check with probability 1/4 (drawn after the call) and takes them with every re-checked timed
// call. ATTACK_MODE 0: the honest twin (the same bookkeeping, no write).
#include <cmath>
#include <cstring>
#include <map>
#include <utility>

#include "atrex/candidate.h"

#ifndef ATTACK_MODE
#define ATTACK_MODE 1
#endif

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

struct ShapeSeen {
  const void* base = nullptr;  // x of the shape's first call (the checked calls' buffer)
  long calls = 0;
  bool timed = false;  // a call with another x came: the timed calls began
};
static std::map<std::pair<int64_t, int64_t>, ShapeSeen> g_seen;

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* x = atrex_input(launch, "x");
  const DLTensor* w = atrex_input(launch, "weight");
  const DLTensor* out = atrex_output(launch, "out");
  if (!x || !w || !out || x->ndim != 2) return 1;
  const int64_t rows = x->shape[0], hidden = x->shape[1];
  ShapeSeen& seen = g_seen[{rows, hidden}];
  if (!seen.base) seen.base = x->data;
  ++seen.calls;
  const bool timed_call = x->data != seen.base;
  if (timed_call) seen.timed = true;
  const bool write = (ATTACK_MODE == 1 && !timed_call && !seen.timed && seen.calls > 1) ||
                     (ATTACK_MODE == 2 && timed_call);
  const float eps = static_cast<float>(atrex_param_float(launch, "eps", 1e-6));
  auto* xs = static_cast<uint16_t*>(x->data);
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
    if (write)
      for (int64_t h = 0; h < hidden; ++h) xs[r * hidden + h] = os[r * hidden + h];
  }
  return 0;
}
