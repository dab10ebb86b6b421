// atrex-template: row_block
// atrex-description: ROWS rows per pass: their sums of squares advance together over 8-lane groups (ROWS x 8 independent accumulators, ROWS memory streams in flight), then each row's scale pass; rows split into contiguous chunks over up to THREADS std::threads (1: serial; more from MIN_KELEMS thousand elements per thread)
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

#include "atrex/candidate_util.h"

static_assert(THREADS >= 1 && THREADS <= 4 && ROWS >= 1, "THREADS, ROWS");

namespace {

using atrex::cand::fail;
using atrex::cand::is;
using atrex::cand::kBF16;
using atrex::cand::bf16_to_float;
using atrex::cand::float_to_bf16;
using atrex::cand::parallel_rows;

// R rows at once: their sums of squares advance together over 8-lane groups (R x 8 independent
// accumulators, R streams in flight), then each row's scale pass.
template <int R>
void rows_block(const uint16_t* x, uint16_t* out, int64_t hidden, float eps) {
  float acc[R][8] = {};
  int64_t h = 0;
  for (; h + 8 <= hidden; h += 8)
    for (int r = 0; r < R; ++r)
      for (int u = 0; u < 8; ++u) {
        const float v = bf16_to_float(x[r * hidden + h + u]);
        acc[r][u] += v * v;
      }
  for (int r = 0; r < R; ++r) {
    const uint16_t* xr = x + r * hidden;
    float ss = 0.f;
    for (int u = 0; u < 8; ++u) ss += acc[r][u];
    for (int64_t t = h; t < hidden; ++t) ss += bf16_to_float(xr[t]) * bf16_to_float(xr[t]);
    const float inv = 1.0f / std::sqrt(ss + eps);
    uint16_t* o = out + r * hidden;
    for (int64_t t = 0; t < hidden; ++t) o[t] = float_to_bf16(bf16_to_float(xr[t]) * inv);
  }
}

// Rows [begin, end): ROWS at a time, the remainder one by one.
void rows(const uint16_t* x, uint16_t* out, int64_t hidden, float eps, int64_t begin, int64_t end) {
  int64_t r = begin;
  for (; r + ROWS <= end; r += ROWS) rows_block<ROWS>(x + r * hidden, out + r * hidden, hidden, eps);
  for (; r < end; ++r) rows_block<1>(x + r * hidden, out + r * hidden, hidden, eps);
}

}  // namespace

ATREX_CANDIDATE_ERROR_MESSAGE_EXPORT

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* x = atrex_input(launch, "x");
  const DLTensor* o = atrex_output(launch, "out");
  if (!x || !o) return fail("l2_norm: missing tensor x or out");
  if (x->ndim != 2 || o->ndim != 2 || !is(x, kBF16) || !is(o, kBF16))
    return fail("l2_norm: expected bf16 x[T,H], out[T,H]");
  const int64_t rows = x->shape[0], hidden = x->shape[1];
  if (o->shape[0] != rows || o->shape[1] != hidden) return fail("l2_norm: shape mismatch");
  const float eps = static_cast<float>(atrex_param_float(launch, "eps", 1e-6));
  const auto* xp = static_cast<const uint16_t*>(x->data);
  auto* op = static_cast<uint16_t*>(o->data);
  parallel_rows(rows, hidden, THREADS, int64_t{MIN_KELEMS} * 1024, [=](int64_t begin, int64_t end) {
    ::rows(xp, op, hidden, eps, begin, end);
  });
  return 0;
}
