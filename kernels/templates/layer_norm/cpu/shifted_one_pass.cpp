// atrex-template: shifted_one_pass
// atrex-description: per row, one pass accumulates the sum and the sum of squares of x - x[0] (the shift by the row's first value keeps the single-pass variance free of cancellation) over UNROLL independent lanes, then one affine-and-round pass: two reads of the row instead of three; rows split over up to THREADS std::threads when the work is large enough
// atrex-param: THREADS = 2 | 1, 2
// atrex-param: UNROLL = 8 | 1, 8
#ifndef THREADS
#define THREADS 2
#endif
#ifndef UNROLL
#define UNROLL 8
#endif
#define MIN_KELEMS 64

#include <cmath>
#include <cstdint>

#include "atrex/candidate_util.h"

namespace {

using atrex::cand::bf16_to_float;
using atrex::cand::fail;
using atrex::cand::float_to_bf16;
using atrex::cand::kBF16;
using atrex::cand::parallel_rows;

struct Args {
  const uint16_t *x, *w, *b;
  uint16_t* out;
  int64_t hidden;
};

// Rows [begin, end).
void rows(const Args& a, int64_t begin, int64_t end) {
  const int64_t hd = a.hidden, main = hd / UNROLL * UNROLL;
  const float inv_h = 1.0f / static_cast<float>(hd);
  for (int64_t r = begin; r < end; ++r) {
    const uint16_t* xr = a.x + r * hd;
    const float shift = bf16_to_float(xr[0]);
    float s1[UNROLL] = {}, s2[UNROLL] = {};
    for (int64_t h = 0; h < main; h += UNROLL)
      for (int u = 0; u < UNROLL; ++u) {
        const float d = bf16_to_float(xr[h + u]) - shift;
        s1[u] += d;
        s2[u] += d * d;
      }
    for (int64_t h = main; h < hd; ++h) {
      const float d = bf16_to_float(xr[h]) - shift;
      s1[0] += d;
      s2[0] += d * d;
    }
    float t1 = 0.f, t2 = 0.f;
    for (int u = 0; u < UNROLL; ++u) {
      t1 += s1[u];
      t2 += s2[u];
    }
    const float dmean = t1 * inv_h;
    const float var = std::fmax(t2 * inv_h - dmean * dmean, 0.0f);
    const float mean = shift + dmean;
    const float rstd = 1.0f / std::sqrt(var + 1e-5f);
    uint16_t* orow = a.out + r * hd;
    for (int64_t h = 0; h < hd; ++h)
      orow[h] = float_to_bf16(((bf16_to_float(xr[h]) - mean) * rstd) * bf16_to_float(a.w[h]) +
                              bf16_to_float(a.b[h]));
  }
}

}  // namespace

ATREX_CANDIDATE_ERROR_MESSAGE_EXPORT

// x [..., H], weight, bias [H] (bf16) -> out [..., H] bf16; rows = numel(x) / H.
ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  atrex::cand::Tensors ts(launch, "layer_norm");
  const DLTensor* x0 = atrex_input(launch, "x");
  const int nd = x0 && x0->ndim >= 1 ? x0->ndim : 1;  // any rank >= 1
  const DLTensor* x = ts.input("x", kBF16, nd);
  const DLTensor* w = ts.input("weight", kBF16, 1);
  const DLTensor* b = ts.input("bias", kBF16, 1);
  const DLTensor* o = ts.output("out", kBF16, nd);
  ts.same_dims(x, o);
  if (!ts.ok()) return ts.failed();
  const int64_t hidden = x->shape[x->ndim - 1];
  if (w->shape[0] != hidden || b->shape[0] != hidden)
    return fail("layer_norm: weight and bias must be [shape[-1]]");
  if (hidden == 0) return 0;
  const Args a{static_cast<const uint16_t*>(x->data), static_cast<const uint16_t*>(w->data),
               static_cast<const uint16_t*>(b->data), static_cast<uint16_t*>(o->data), hidden};
  parallel_rows(atrex_numel(x) / hidden, hidden, THREADS, int64_t{MIN_KELEMS} * 1024,
                [&](int64_t lo, int64_t hi) { rows(a, lo, hi); });
  return 0;
}
