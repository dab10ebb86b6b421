// atrex-template: expert_panels
// atrex-description: expert-grouped: a counting sort groups the (token, expert) pairs by expert; per expert its tokens' hidden rows are widened to fp32 once, then PANEL gate rows with their PANEL up rows are widened to an fp32 panel and dotted with every token of the expert (each weight element converted once per expert instead of once per token), silu(gate) * up kept as an fp32 [tokens, N] block, and the down projection runs the same way over PANEL-row panels of w2, adding topk_weight * y into out
// atrex-param: PANEL = 16 | 4, 16
#ifndef PANEL
#define PANEL 16
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "atrex/candidate_util.h"

static_assert(PANEL >= 1 && PANEL <= 64, "PANEL");

namespace {

using atrex::cand::bf16_to_float;
using atrex::cand::fail;
using atrex::cand::kBF16;
using atrex::cand::kF32;
using atrex::cand::kI32;

inline float dotf(const float* a, const float* b, int64_t n) {
  float s0 = 0.f, s1 = 0.f, s2 = 0.f, s3 = 0.f;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += a[i] * b[i];
    s1 += a[i + 1] * b[i + 1];
    s2 += a[i + 2] * b[i + 2];
    s3 += a[i + 3] * b[i + 3];
  }
  for (; i < n; ++i) s0 += a[i] * b[i];
  return (s0 + s1) + (s2 + s3);
}

void widen(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_float(src[i]);
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
  const int64_t k = ids->shape[1];
  if (w1->shape[2] != H || w2->shape[0] != E || w2->shape[1] != H || w2->shape[2] != N ||
      ids->shape[0] != T || out->shape[0] != T || out->shape[1] != H || w1->shape[1] != 2 * N)
    return fail("fused_moe: inconsistent dims (hidden_states [T, H], w1 [E, 2N, H], w2 [E, H, N])");
  const auto* xp = static_cast<const uint16_t*>(x->data);
  const auto* w1p = static_cast<const uint16_t*>(w1->data);
  const auto* w2p = static_cast<const uint16_t*>(w2->data);
  const auto* twp = static_cast<const float*>(tw->data);
  const auto* idp = static_cast<const int32_t*>(ids->data);
  auto* op = static_cast<float*>(out->data);
  std::fill(op, op + T * H, 0.f);
  // Pairs grouped by expert (stable counting sort).
  const int64_t pairs = T * k;
  std::vector<int64_t> start(static_cast<size_t>(E + 1), 0);
  for (int64_t p = 0; p < pairs; ++p)
    if (idp[p] >= 0 && idp[p] < E) ++start[static_cast<size_t>(idp[p]) + 1];
  for (int64_t e = 0; e < E; ++e) start[static_cast<size_t>(e + 1)] += start[static_cast<size_t>(e)];
  std::vector<int64_t> order(static_cast<size_t>(start[static_cast<size_t>(E)]));
  {
    std::vector<int64_t> next(start.begin(), start.end() - 1);
    for (int64_t p = 0; p < pairs; ++p)
      if (idp[p] >= 0 && idp[p] < E) order[static_cast<size_t>(next[static_cast<size_t>(idp[p])]++)] = p;
  }
  std::vector<float> xs, hs, panel(static_cast<size_t>(2 * PANEL * std::max(H, N)));
  for (int64_t e = 0; e < E; ++e) {
    const int64_t b = start[static_cast<size_t>(e)], m = start[static_cast<size_t>(e + 1)] - b;
    if (m == 0) continue;
    xs.resize(static_cast<size_t>(m * H));
    hs.resize(static_cast<size_t>(m * N));
    for (int64_t i = 0; i < m; ++i)
      widen(xp + order[static_cast<size_t>(b + i)] / k * H, xs.data() + i * H, H);
    const uint16_t* w1e = w1p + e * 2 * N * H;
    for (int64_t n0 = 0; n0 < N; n0 += PANEL) {
      const int64_t np = std::min<int64_t>(PANEL, N - n0);
      widen(w1e + n0 * H, panel.data(), np * H);                      // gate rows
      widen(w1e + (N + n0) * H, panel.data() + PANEL * H, np * H);    // up rows
      for (int64_t i = 0; i < m; ++i) {
        const float* xr = xs.data() + i * H;
        for (int64_t r = 0; r < np; ++r) {
          const float g = dotf(xr, panel.data() + r * H, H);
          const float u = dotf(xr, panel.data() + (PANEL + r) * H, H);
          hs[static_cast<size_t>(i * N + n0 + r)] = g / (1.f + std::exp(-g)) * u;
        }
      }
    }
    const uint16_t* w2e = w2p + e * H * N;
    for (int64_t h0 = 0; h0 < H; h0 += PANEL) {
      const int64_t np = std::min<int64_t>(PANEL, H - h0);
      widen(w2e + h0 * N, panel.data(), np * N);
      for (int64_t i = 0; i < m; ++i) {
        const int64_t p = order[static_cast<size_t>(b + i)];
        const float wt = twp[p];
        float* o = op + p / k * H + h0;
        const float* hr = hs.data() + i * N;
        for (int64_t r = 0; r < np; ++r) o[r] += wt * dotf(hr, panel.data() + r * N, N);
      }
    }
  }
  return 0;
}
