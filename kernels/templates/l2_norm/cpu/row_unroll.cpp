// atrex-template: row_unroll
// atrex-description: single-threaded row loop; sum of squares over UNROLL independent accumulators (SIMD-friendly), then a scale pass
// atrex-param: UNROLL = 8 | 1, 2, 4, 8, 16
#ifndef UNROLL
#define UNROLL 8
#endif

#include <cmath>
#include <cstdint>
#include <cstring>

#include "atrex/candidate.h"

namespace {

const char* g_error = "";
int fail(const char* msg) {
  g_error = msg;
  return 1;
}

inline float bf2f(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
// Round to nearest even on the float bits; NaN stays a (quiet) NaN. Branch-free so loops vectorise.
inline uint16_t f2bf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t nan = (u >> 16) | 0x40u;
  return static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}
bool is_bf16(const DLTensor* t) {
  return t->dtype.code == kDLBfloat && t->dtype.bits == 16 && t->dtype.lanes == 1;
}

void row(const uint16_t* x, uint16_t* out, int64_t hidden, float eps) {
  // Independent partial sums break the add dependency chain and let the compiler use vector lanes.
  float acc[UNROLL] = {};
  int64_t h = 0;
  for (; h + UNROLL <= hidden; h += UNROLL)
    for (int u = 0; u < UNROLL; ++u) {
      const float v = bf2f(x[h + u]);
      acc[u] += v * v;
    }
  float ss = 0.f;
  for (int u = 0; u < UNROLL; ++u) ss += acc[u];
  for (; h < hidden; ++h) ss += bf2f(x[h]) * bf2f(x[h]);
  const float inv = 1.0f / std::sqrt(ss + eps);
  for (h = 0; h < hidden; ++h) out[h] = f2bf(bf2f(x[h]) * inv);
}

}  // namespace

ATREX_CANDIDATE_EXPORT const char* atrex_candidate_error_message(void) { return g_error; }

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* x = atrex_input(launch, "x");
  const DLTensor* o = atrex_output(launch, "out");
  if (!x || !o) return fail("l2_norm: missing tensor x or out");
  if (x->ndim != 2 || o->ndim != 2 || !is_bf16(x) || !is_bf16(o))
    return fail("l2_norm: expected bf16 x[T,H], out[T,H]");
  const int64_t rows = x->shape[0], hidden = x->shape[1];
  if (o->shape[0] != rows || o->shape[1] != hidden) return fail("l2_norm: shape mismatch");
  const float eps = static_cast<float>(atrex_param_float(launch, "eps", 1e-6));
  const auto* xp = static_cast<const uint16_t*>(x->data);
  auto* op = static_cast<uint16_t*>(o->data);
  for (int64_t r = 0; r < rows; ++r) row(xp + r * hidden, op + r * hidden, hidden, eps);
  return 0;
}
