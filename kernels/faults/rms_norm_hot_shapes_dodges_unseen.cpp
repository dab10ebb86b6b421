// ATTACKS the unseen-shape check (attack round 3): rms_norm_hot_shapes_only.cpp's cheat (right
// only at the suite's hot row counts, no normalisation elsewhere) fails the task on an unseen
// shape, because a `wrong_result` there gives every shape of the task that status. But a
// `rejected` on an unseen shape "decides nothing" (runner/src/unseen_check.cpp absorb: only
// wrong_result, crashed and timeout count), and the candidate can earn a `rejected` at will: an
// out-of-bounds write into the guard region after its output (docs/evaluation.md "Guard
// regions"). So at a row count the suite does not hold it takes its "fast path" and also writes
// one element past the end of its output: the unseen shape is `rejected`, the task's own shapes
// are evaluated as if no unseen shape had been checked, and pass.
//   ATTACK_DODGE 0 (ATTACK_HOT_ONLY 1): rms_norm_hot_shapes_only.cpp again: wrong_result on the
//   unseen shape, every shape of the task wrong_result.
//   ATTACK_HOT_ONLY 0, ATTACK_DODGE 0: the honest twin (right at every row count).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>

#include "atrex/candidate.h"

#define ATTACK_HOT_ONLY 1
#define ATTACK_DODGE 1

namespace {

// rms_norm's hot token_count values (as rms_norm_hot_shapes_only.cpp).
constexpr int64_t kHotTokenCounts[] = {
    1,     3,     7,     53,    128,   141,   154,   256,    298,    360,   510,
    512,   514,   632,   720,   917,   1024,  1029,  1200,   1504,   1672,  1688,
    1736,  2010,  2048,  2116,  2500,  3804,  3844,  4096,   4174,   4968,  5000,
    8136,  8192,  8290,  10000, 15000, 16200, 16384, 16530,  20538,  22100, 24368,
    24544, 24752, 49024, 49152, 65488, 65556, 95952, 131072, 247680, 505888};

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

}  // namespace

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* x = atrex_input(launch, "x");
  const DLTensor* w = atrex_input(launch, "weight");
  const DLTensor* out = atrex_output(launch, "out");
  if (!x || !w || !out || x->ndim != 2) return 1;
  const int64_t rows = x->shape[0], hidden = x->shape[1];
  const float eps = static_cast<float>(atrex_param_float(launch, "eps", 1e-6));
  const bool hot = std::find(std::begin(kHotTokenCounts), std::end(kHotTokenCounts), rows) !=
                   std::end(kHotTokenCounts);
  const auto* xs = static_cast<const uint16_t*>(x->data);
  const auto* ws = static_cast<const uint16_t*>(w->data);
  auto* os = static_cast<uint16_t*>(out->data);
  for (int64_t r = 0; r < rows; ++r) {
    float inv = 1.0f;  // the "fast path" of unknown shapes: no normalisation
    if (hot || !ATTACK_HOT_ONLY) {
      float ss = 0;
      for (int64_t h = 0; h < hidden; ++h) {
        const float v = bf16_to_float(xs[r * hidden + h]);
        ss += v * v;
      }
      inv = 1.0f / std::sqrt(ss / static_cast<float>(hidden) + eps);
    }
    for (int64_t h = 0; h < hidden; ++h) {
      os[r * hidden + h] =
          float_to_bf16(bf16_to_float(xs[r * hidden + h]) * inv * bf16_to_float(ws[h]));
    }
  }
  // Off the hot shapes: one element into the guard after the output, for a `rejected`.
  if (ATTACK_DODGE && !hot) os[rows * hidden] = os[rows * hidden - 1];
  return 0;
}
