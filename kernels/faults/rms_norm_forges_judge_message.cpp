// ATTACKS the judge's pipe with a message of its own (docs/evaluation.md "The judge": messages to
// the judge that do not parse, or that no part of the protocol sends, end the judge with a
// `tampering` verdict). On its first call the candidate writes one line to fd 6 (the child's
// pipe to the judge) before computing honestly:
//   ATTACK_FORGE 1: {"op":"verdict","shape_id":"15","status":"ok"} (an op the protocol has not)
//   ATTACK_FORGE 2: a call_end with a member of its own ({"op":"call_end","calls":1,
//                   "ok":true}: the typed reader refuses the extra member)
//   ATTACK_FORGE 0: the honest twin (writes nothing).
// Expected: the whole task `rejected`, its error starting "tampering: ".
#include <unistd.h>

#include <cmath>
#include <cstring>

#include "atrex/candidate.h"

#ifndef ATTACK_FORGE
#define ATTACK_FORGE 1
#endif

static bool g_forged = false;

static void forge() {
  g_forged = true;
  const char* line = ATTACK_FORGE == 1
                         ? "{\"op\":\"verdict\",\"shape_id\":\"15\",\"status\":\"ok\"}\n"
                     : ATTACK_FORGE == 2
                         ? "{\"op\":\"call_end\",\"calls\":1,\"ok\":true}\n"
                         : "";
  for (size_t done = 0, n = std::strlen(line); done < n;) {
    const ssize_t w = write(6, line + done, n - done);
    if (w <= 0) return;
    done += static_cast<size_t>(w);
  }
}

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
  if (!g_forged) forge();
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
