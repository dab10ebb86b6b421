// atrex-template: expert_panels
// atrex-description: expert-grouped: a counting sort groups the (token, expert) pairs by expert; per expert its tokens' rows are dequantised to fp32 once, PANEL gate rows with their PANEL up rows are dequantised (fp8 decode table times fc1_scale) into an fp32 panel and dotted with every token of the expert, silu(gate) * up kept as an fp32 [tokens, N] block, the down projection runs the same way over dequantised PANEL-row panels of w2 into an fp32 [T, H] sum, cast to e4m3 at the end (nearest even, NaN past 464 as torch)
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

using atrex::cand::fail;
using atrex::cand::fp8_e4m3_to_float;
using atrex::cand::kF32;
using atrex::cand::kFP8E4M3;
using atrex::cand::kI32;

struct Lut {
  float v[256];
  Lut() {
    for (int i = 0; i < 256; ++i) v[i] = fp8_e4m3_to_float(static_cast<uint8_t>(i));
  }
};

// e4m3fn code of f by the decode table: nearest, ties to the even code, NaN past 464.
uint8_t to_e4m3(float f, const Lut& lut) {
  const uint8_t sign = std::signbit(f) ? 0x80 : 0;
  const float a = std::fabs(f);
  if (!(a <= 464.f)) return sign | 0x7f;
  const float* first = lut.v;
  const int up = static_cast<int>(std::upper_bound(first, first + 127, a) - first);  // > a
  if (up == 127) return sign | 126;
  const int lo = up - 1;
  const float d0 = a - lut.v[lo], d1 = lut.v[up] - a;
  const int code = d0 < d1 ? lo : d1 < d0 ? up : (lo % 2 == 0 ? lo : up);
  return sign | static_cast<uint8_t>(code);
}

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

// dst[i] = lut(src[i]) * scale[i / blk] over one row of n.
void dequant(const uint8_t* src, const float* scale, int64_t blk, float* dst, int64_t n,
             const Lut& lut) {
  for (int64_t i = 0; i < n; ++i) dst[i] = lut.v[src[i]] * scale[i / blk];
}

}  // namespace

ATREX_CANDIDATE_ERROR_MESSAGE_EXPORT

// hidden_states [T, H] e4m3 with a_scale [T, H/bk], w1 [E, 2N, H] e4m3 with fc1_scale
// [E, 2N/bn, H/bk], w2 [E, H, N] e4m3 with fc2_scale [E, H/bk, N/bn], topk_weights [T, k] fp32,
// topk_ids [T, k] int32 -> out [T, H] e4m3 = fp8(sum_j w[t, j] * W2 . (silu(W1g . x) * (W1u . x)))
// on the dequantised operands.
ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  atrex::cand::Tensors ts(launch, "fp8_blockscale_fused_moe");
  const DLTensor* x = ts.input("hidden_states", kFP8E4M3, 2);
  const DLTensor* w1 = ts.input("w1", kFP8E4M3, 3);
  const DLTensor* w2 = ts.input("w2", kFP8E4M3, 3);
  const DLTensor* tw = ts.input("topk_weights", kF32, 2);
  const DLTensor* ids = ts.input("topk_ids", kI32, 2);
  const DLTensor* as = ts.input("a_scale", kF32, 2);
  const DLTensor* s1 = ts.input("fc1_scale", kF32, 3);
  const DLTensor* s2 = ts.input("fc2_scale", kF32, 3);
  const DLTensor* out = ts.output("out", kFP8E4M3, 2);
  ts.same_dims(tw, ids);
  ts.same_dims(x, out);
  if (!ts.ok()) return ts.failed();
  const int64_t T = x->shape[0], H = x->shape[1], E = w1->shape[0], N = w1->shape[1] / 2;
  const int64_t k = ids->shape[1];
  const int64_t bn = atrex_param_int(launch, "scale_block_n", 128);
  const int64_t bk = atrex_param_int(launch, "scale_block_k", 128);
  if (bn < 1 || bk < 1 || H % bk != 0 || N % bn != 0 || w1->shape[2] != H || w2->shape[0] != E ||
      w2->shape[1] != H || w2->shape[2] != N || w1->shape[1] != 2 * N || ids->shape[0] != T ||
      as->shape[1] != H / bk || s1->shape[1] != 2 * N / bn || s1->shape[2] != H / bk ||
      s2->shape[1] != H / bk || s2->shape[2] != N / bn)
    return fail("fp8_blockscale_fused_moe: inconsistent dims or scale blocks (bn %lld, bk %lld)",
                static_cast<long long>(bn), static_cast<long long>(bk));
  static const Lut lut;
  const auto* xp = static_cast<const uint8_t*>(x->data);
  const auto* w1p = static_cast<const uint8_t*>(w1->data);
  const auto* w2p = static_cast<const uint8_t*>(w2->data);
  const auto* twp = static_cast<const float*>(tw->data);
  const auto* idp = static_cast<const int32_t*>(ids->data);
  const auto* asp = static_cast<const float*>(as->data);
  const auto* s1p = static_cast<const float*>(s1->data);
  const auto* s2p = static_cast<const float*>(s2->data);
  auto* op = static_cast<uint8_t*>(out->data);
  const int64_t hb = H / bk, nb = N / bn, pairs = T * k;
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
  std::vector<float> acc(static_cast<size_t>(T * H), 0.f), xs, hs;
  std::vector<float> panel(static_cast<size_t>(2 * PANEL * std::max(H, N)));
  for (int64_t e = 0; e < E; ++e) {
    const int64_t b = start[static_cast<size_t>(e)], m = start[static_cast<size_t>(e + 1)] - b;
    if (m == 0) continue;
    xs.resize(static_cast<size_t>(m * H));
    hs.resize(static_cast<size_t>(m * N));
    for (int64_t i = 0; i < m; ++i) {
      const int64_t t = order[static_cast<size_t>(b + i)] / k;
      dequant(xp + t * H, asp + t * hb, bk, xs.data() + i * H, H, lut);
    }
    const uint8_t* w1e = w1p + e * 2 * N * H;
    const float* s1e = s1p + e * (2 * N / bn) * hb;
    for (int64_t n0 = 0; n0 < N; n0 += PANEL) {
      const int64_t np = std::min<int64_t>(PANEL, N - n0);
      for (int64_t r = 0; r < np; ++r) {
        const int64_t g = n0 + r, u = N + n0 + r;
        dequant(w1e + g * H, s1e + (g / bn) * hb, bk, panel.data() + r * H, H, lut);
        dequant(w1e + u * H, s1e + (u / bn) * hb, bk, panel.data() + (PANEL + r) * H, H, lut);
      }
      for (int64_t i = 0; i < m; ++i) {
        const float* xr = xs.data() + i * H;
        for (int64_t r = 0; r < np; ++r) {
          const float gt = dotf(xr, panel.data() + r * H, H);
          const float up = dotf(xr, panel.data() + (PANEL + r) * H, H);
          hs[static_cast<size_t>(i * N + n0 + r)] = gt / (1.f + std::exp(-gt)) * up;
        }
      }
    }
    const uint8_t* w2e = w2p + e * H * N;
    const float* s2e = s2p + e * hb * nb;
    for (int64_t h0 = 0; h0 < H; h0 += PANEL) {
      const int64_t np = std::min<int64_t>(PANEL, H - h0);
      for (int64_t r = 0; r < np; ++r)
        dequant(w2e + (h0 + r) * N, s2e + ((h0 + r) / bk) * nb, bn, panel.data() + r * N, N, lut);
      for (int64_t i = 0; i < m; ++i) {
        const int64_t p = order[static_cast<size_t>(b + i)];
        const float wt = twp[p];
        float* o = acc.data() + p / k * H + h0;
        const float* hr = hs.data() + i * N;
        for (int64_t r = 0; r < np; ++r) o[r] += wt * dotf(hr, panel.data() + r * N, N);
      }
    }
  }
  for (int64_t i = 0; i < T * H; ++i) op[i] = to_e4m3(acc[static_cast<size_t>(i)], lut);
  return 0;
}
