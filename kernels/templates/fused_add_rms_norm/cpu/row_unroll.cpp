// atrex-template: row_unroll
// atrex-description: one row at a time, rows split into contiguous chunks over up to THREADS std::threads (1: serial; more only when the work reaches MIN_KELEMS thousand elements per thread); residual_out written in pass 1 with the sum of squares over UNROLL independent accumulators (SIMD-friendly), then a scale pass decoding residual_out and weight again
// atrex-param: THREADS = 2 | 1, 2, 3, 4
// atrex-param: UNROLL = 8 | 4, 8, 16
// atrex-param: MIN_KELEMS = 64 | 16, 64, 256, 1024
#ifndef THREADS
#define THREADS 2
#endif
#ifndef UNROLL
#define UNROLL 8
#endif
#ifndef MIN_KELEMS
#define MIN_KELEMS 64
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <thread>

#include "atrex/candidate_util.h"

static_assert(THREADS >= 1 && THREADS <= 4, "THREADS");

namespace {

using atrex::cand::fail;
using atrex::cand::is;
using atrex::cand::kBF16;
using atrex::cand::bf16_to_float;
using atrex::cand::float_to_bf16;
using atrex::cand::parallel_rows;

// residual_out = bf16(x + residual) is rounded before it enters the sum of squares, as in the
// reference.
inline float add_round(const uint16_t* x, const uint16_t* res, uint16_t* ro, int64_t h) {
  const uint16_t s = float_to_bf16(bf16_to_float(x[h]) + bf16_to_float(res[h]));
  ro[h] = s;
  return bf16_to_float(s);
}

void row(const uint16_t* x, const uint16_t* res, const uint16_t* w, uint16_t* out, uint16_t* ro,
         int64_t hidden, float eps) {
  // Independent partial sums break the add dependency chain and let the compiler use vector lanes.
  float acc[UNROLL] = {};
  int64_t h = 0;
  for (; h + UNROLL <= hidden; h += UNROLL)
    for (int u = 0; u < UNROLL; ++u) {
      const float v = add_round(x, res, ro, h + u);
      acc[u] += v * v;
    }
  float ss = 0.f;
  for (int u = 0; u < UNROLL; ++u) ss += acc[u];
  for (; h < hidden; ++h) {
    const float v = add_round(x, res, ro, h);
    ss += v * v;
  }
  const float inv = 1.0f / std::sqrt(ss / static_cast<float>(hidden) + eps);
  for (h = 0; h < hidden; ++h) out[h] = float_to_bf16((bf16_to_float(ro[h]) * inv) * bf16_to_float(w[h]));
}

}  // namespace

ATREX_CANDIDATE_ERROR_MESSAGE_EXPORT

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* x = atrex_input(launch, "x");
  const DLTensor* r = atrex_input(launch, "residual");
  const DLTensor* w = atrex_input(launch, "weight");
  const DLTensor* o = atrex_output(launch, "out");
  const DLTensor* ro = atrex_output(launch, "residual");
  if (!x || !r || !w || !o || !ro) return fail("fused_add_rms_norm: missing tensor");
  const DLTensor* mats[4] = {x, r, o, ro};
  for (const DLTensor* t : mats)
    if (t->ndim != 2 || !is(t, kBF16) || t->shape[0] != x->shape[0] || t->shape[1] != x->shape[1])
      return fail("fused_add_rms_norm: expected bf16 [T,H] x, residual, out, residual_out");
  if (w->ndim != 1 || !is(w, kBF16) || w->shape[0] != x->shape[1])
    return fail("fused_add_rms_norm: bad weight");
  const int64_t rows = x->shape[0], hidden = x->shape[1];
  const float eps = static_cast<float>(atrex_param_float(launch, "eps", 1e-6));
  const auto* xp = static_cast<const uint16_t*>(x->data);
  const auto* rp = static_cast<const uint16_t*>(r->data);
  const auto* wp = static_cast<const uint16_t*>(w->data);
  auto* op = static_cast<uint16_t*>(o->data);
  auto* rop = static_cast<uint16_t*>(ro->data);
  parallel_rows(rows, 2 * hidden, THREADS, int64_t{MIN_KELEMS} * 1024, [=](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      row(xp + i * hidden, rp + i * hidden, wp, op + i * hidden, rop + i * hidden, hidden, eps);
  });
  return 0;
}
