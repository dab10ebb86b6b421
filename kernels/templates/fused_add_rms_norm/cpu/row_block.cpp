// atrex-template: row_block
// atrex-description: ROWS rows per pass, 64 lanes at a time: each row's bf16(x + residual) staged in a stack buffer (vectorised although residual_out is the residual buffer), squared into ROWS x 8 independent accumulators, then stored to residual_out, the weight decoded to fp32 once per call and shared by every row's scale pass; rows split into contiguous chunks over up to THREADS std::threads (1: serial; more from MIN_KELEMS thousand elements per thread)
// atrex-param: THREADS = 2 | 1, 2
// atrex-param: ROWS = 4 | 2, 4
// atrex-param: MIN_KELEMS = 64 | 16, 64
#ifndef THREADS
#define THREADS 2
#endif
#ifndef ROWS
#define ROWS 4
#endif
#ifndef MIN_KELEMS
#define MIN_KELEMS 64
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "atrex/candidate_util.h"

static_assert(THREADS >= 1 && THREADS <= 4 && ROWS >= 1, "THREADS, ROWS");

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

// R rows at once, 64 lanes at a time: each row's bf16(x + residual) goes to a stack buffer first
// (a loop that writes no output, so it vectorises even though residual_out may be the residual
// buffer itself), its squares into the row's 8 accumulators (R x 8 independent chains, 2R
// streams in flight), then the buffer is stored to residual_out; each row's scale pass reads
// the call's fp32 weight. In place is safe: every lane is read before it is written.
template <int R>
void rows_block(const uint16_t* x, const uint16_t* res, const float* w, uint16_t* out,
                uint16_t* ro, int64_t hidden, float eps) {
  float acc[R][8] = {};
  uint16_t sum[64];
  int64_t h = 0;
  for (; h + 64 <= hidden; h += 64)
    for (int r = 0; r < R; ++r) {
      const uint16_t* xr = x + r * hidden + h;
      const uint16_t* rr = res + r * hidden + h;
      for (int u = 0; u < 64; ++u) sum[u] = float_to_bf16(bf16_to_float(xr[u]) + bf16_to_float(rr[u]));
      for (int u = 0; u < 64; u += 8)
        for (int l = 0; l < 8; ++l) {
          const float v = bf16_to_float(sum[u + l]);
          acc[r][l] += v * v;
        }
      std::memcpy(ro + r * hidden + h, sum, sizeof sum);
    }
  for (int r = 0; r < R; ++r) {
    const int64_t off = r * hidden;
    float ss = 0.f;
    for (int l = 0; l < 8; ++l) ss += acc[r][l];
    for (int64_t t = h; t < hidden; ++t) {
      const float v = add_round(x + off, res + off, ro + off, t);
      ss += v * v;
    }
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(hidden) + eps);
    for (int64_t t = 0; t < hidden; ++t)
      out[off + t] = float_to_bf16((bf16_to_float(ro[off + t]) * inv) * w[t]);
  }
}

// Rows [begin, end): ROWS at a time, the remainder one by one.
void rows(const uint16_t* x, const uint16_t* res, const float* w, uint16_t* out, uint16_t* ro,
          int64_t hidden, float eps, int64_t begin, int64_t end) {
  int64_t i = begin;
  for (; i + ROWS <= end; i += ROWS)
    rows_block<ROWS>(x + i * hidden, res + i * hidden, w, out + i * hidden, ro + i * hidden, hidden, eps);
  for (; i < end; ++i)
    rows_block<1>(x + i * hidden, res + i * hidden, w, out + i * hidden, ro + i * hidden, hidden, eps);
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
  std::vector<float> wf(static_cast<size_t>(hidden));
  for (int64_t h = 0; h < hidden; ++h) wf[static_cast<size_t>(h)] = bf16_to_float(wp[h]);
  const float* wfp = wf.data();
  parallel_rows(rows, 2 * hidden, THREADS, int64_t{MIN_KELEMS} * 1024, [=](int64_t begin, int64_t end) {
    ::rows(xp, rp, wfp, op, rop, hidden, eps, begin, end);
  });
  return 0;
}
