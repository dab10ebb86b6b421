// atrex-template: token_loop
// atrex-description: token by token: the token's hidden row converted to fp32 once, then for each routed expert the 2N gate and up dot products over H (bf16 weights widened in the loop), silu(gate) * up in fp32, the H down dot products over N, and topk_weight * y added to the fp32 output row; tokens split over THREADS std::threads
// atrex-param: THREADS = 1 | 1, 2
#ifndef THREADS
#define THREADS 1
#endif

#include <cmath>
#include <cstdint>
#include <vector>

#include "atrex/candidate_util.h"

static_assert(THREADS >= 1 && THREADS <= 4, "THREADS");

namespace {

using atrex::cand::bf16_to_float;
using atrex::cand::fail;
using atrex::cand::kBF16;
using atrex::cand::kF32;
using atrex::cand::kI32;
using atrex::cand::parallel_rows;

struct Args {
  const uint16_t *x, *w1, *w2;
  const float* tw;
  const int32_t* ids;
  float* out;
  int64_t H, N, E, k;
};

float dot(const float* a, const uint16_t* w, int64_t n) {
  float s0 = 0.f, s1 = 0.f, s2 = 0.f, s3 = 0.f;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += a[i] * bf16_to_float(w[i]);
    s1 += a[i + 1] * bf16_to_float(w[i + 1]);
    s2 += a[i + 2] * bf16_to_float(w[i + 2]);
    s3 += a[i + 3] * bf16_to_float(w[i + 3]);
  }
  for (; i < n; ++i) s0 += a[i] * bf16_to_float(w[i]);
  return (s0 + s1) + (s2 + s3);
}

void do_tokens(const Args& a, int64_t t0, int64_t t1) {
  std::vector<float> xf(static_cast<size_t>(a.H)), h(static_cast<size_t>(a.N));
  for (int64_t t = t0; t < t1; ++t) {
    for (int64_t i = 0; i < a.H; ++i) xf[static_cast<size_t>(i)] = bf16_to_float(a.x[t * a.H + i]);
    float* o = a.out + t * a.H;
    for (int64_t i = 0; i < a.H; ++i) o[i] = 0.f;
    for (int64_t j = 0; j < a.k; ++j) {
      const int32_t e = a.ids[t * a.k + j];
      if (e < 0 || e >= a.E) continue;
      const uint16_t* w1 = a.w1 + e * 2 * a.N * a.H;
      const uint16_t* w2 = a.w2 + e * a.H * a.N;
      for (int64_t n = 0; n < a.N; ++n) {
        const float g = dot(xf.data(), w1 + n * a.H, a.H);
        const float u = dot(xf.data(), w1 + (a.N + n) * a.H, a.H);
        h[static_cast<size_t>(n)] = g / (1.f + std::exp(-g)) * u;
      }
      const float wt = a.tw[t * a.k + j];
      for (int64_t r = 0; r < a.H; ++r) o[r] += wt * dot(h.data(), w2 + r * a.N, a.N);
    }
  }
}

}  // namespace

ATREX_CANDIDATE_ERROR_MESSAGE_EXPORT

// hidden_states [T, H] bf16, w1 [E, 2N, H] bf16 (gate rows then up rows), w2 [E, H, N] bf16,
// topk_weights [T, k] fp32, topk_ids [T, k] int32 -> out [T, H] fp32 =
// sum_j topk_weights[t, j] * w2[e] . (silu(w1_gate[e] . x[t]) * (w1_up[e] . x[t])).
ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  atrex::cand::Tensors ts(launch, "fused_moe");
  const DLTensor* x = ts.input("hidden_states", kBF16, 2);
  const DLTensor* w1 = ts.input("w1", kBF16, 3);
  const DLTensor* w2 = ts.input("w2", kBF16, 3);
  const DLTensor* tw = ts.input("topk_weights", kF32, 2);
  const DLTensor* ids = ts.input("topk_ids", kI32, 2);
  const DLTensor* out = ts.output("out", kF32, 2);
  ts.same_dims(tw, ids);
  if (!ts.ok()) return ts.failed();
  const int64_t T = x->shape[0], H = x->shape[1], E = w1->shape[0], N = w1->shape[1] / 2;
  if (w1->shape[2] != H || w2->shape[0] != E || w2->shape[1] != H || w2->shape[2] != N ||
      ids->shape[0] != T || out->shape[0] != T || out->shape[1] != H || w1->shape[1] != 2 * N)
    return fail("fused_moe: inconsistent dims (hidden_states [T, H], w1 [E, 2N, H], w2 [E, H, N])");
  Args a{static_cast<const uint16_t*>(x->data), static_cast<const uint16_t*>(w1->data),
         static_cast<const uint16_t*>(w2->data), static_cast<const float*>(tw->data),
         static_cast<const int32_t*>(ids->data), static_cast<float*>(out->data), H, N, E,
         ids->shape[1]};
  parallel_rows(T, a.k * 3 * N * H, THREADS, 1 << 20,
                [&](int64_t b, int64_t e) { do_tokens(a, b, e); });
  return 0;
}
