// atrex-template: token_loop
// atrex-description: token by token: the token's fp8 row dequantised once (256-entry decode table, a_scale per 128 columns), then per routed expert the gate and up dot products over H taken per scale block and multiplied by the block's fc1_scale, silu(gate) * up in fp32, the down dot products over N per scale block times fc2_scale, topk_weight * y summed in fp32 and cast to e4m3 (round to nearest even, NaN past 464 as torch); tokens split over THREADS std::threads
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

using atrex::cand::fail;
using atrex::cand::fp8_e4m3_to_float;
using atrex::cand::kF32;
using atrex::cand::kFP8E4M3;
using atrex::cand::kI32;
using atrex::cand::parallel_rows;

struct Lut {
  float v[256];
  Lut() {
    for (int i = 0; i < 256; ++i) v[i] = fp8_e4m3_to_float(static_cast<uint8_t>(i));
  }
};

// e4m3fn of f, nearest with ties to the even code; past 464 (halfway to the next binade step)
// NaN (0x7f), as torch's cast.
uint8_t to_e4m3(float f, const Lut& lut) {
  const uint8_t sign = std::signbit(f) ? 0x80 : 0;
  const float a = std::fabs(f);
  if (!(a <= 464.f)) return sign | 0x7f;
  int lo = 0, hi = 126;  // the largest code with value <= a
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (lut.v[mid] <= a) lo = mid; else hi = mid - 1;
  }
  if (lo == 126) return sign | 126;
  const float below = lut.v[lo], above = lut.v[lo + 1];
  const float d0 = a - below, d1 = above - a;
  const int code = d0 < d1 ? lo : d1 < d0 ? lo + 1 : (lo % 2 == 0 ? lo : lo + 1);
  return sign | static_cast<uint8_t>(code);
}

struct Args {
  const uint8_t *x, *w1, *w2;
  const float *tw, *as, *s1, *s2;
  const int32_t* ids;
  uint8_t* out;
  int64_t H, N, E, k, bn, bk;
};

float dot(const float* a, const uint8_t* w, int64_t n, const Lut& lut) {
  float s0 = 0.f, s1 = 0.f;
  int64_t i = 0;
  for (; i + 2 <= n; i += 2) {
    s0 += a[i] * lut.v[w[i]];
    s1 += a[i + 1] * lut.v[w[i + 1]];
  }
  for (; i < n; ++i) s0 += a[i] * lut.v[w[i]];
  return s0 + s1;
}

void do_tokens(const Args& a, const Lut& lut, int64_t t0, int64_t t1) {
  const int64_t hb = a.H / a.bk, nb = a.N / a.bn;
  std::vector<float> xf(static_cast<size_t>(a.H)), h(static_cast<size_t>(a.N)),
      acc(static_cast<size_t>(a.H));
  for (int64_t t = t0; t < t1; ++t) {
    for (int64_t i = 0; i < a.H; ++i)
      xf[static_cast<size_t>(i)] = lut.v[a.x[t * a.H + i]] * a.as[t * hb + i / a.bk];
    for (auto& v : acc) v = 0.f;
    for (int64_t j = 0; j < a.k; ++j) {
      const int64_t e = a.ids[t * a.k + j];
      if (e < 0 || e >= a.E) continue;
      const uint8_t* w1 = a.w1 + e * 2 * a.N * a.H;
      const uint8_t* w2 = a.w2 + e * a.H * a.N;
      const float* s1 = a.s1 + e * (2 * a.N / a.bn) * hb;
      const float* s2 = a.s2 + e * hb * nb;
      for (int64_t n = 0; n < a.N; ++n) {
        float g = 0.f, u = 0.f;
        for (int64_t b = 0; b < hb; ++b) {
          g += dot(xf.data() + b * a.bk, w1 + n * a.H + b * a.bk, a.bk, lut) * s1[(n / a.bn) * hb + b];
          u += dot(xf.data() + b * a.bk, w1 + (a.N + n) * a.H + b * a.bk, a.bk, lut) *
               s1[((a.N + n) / a.bn) * hb + b];
        }
        h[static_cast<size_t>(n)] = g / (1.f + std::exp(-g)) * u;
      }
      const float wt = a.tw[t * a.k + j];
      for (int64_t r = 0; r < a.H; ++r) {
        float y = 0.f;
        for (int64_t b = 0; b < nb; ++b)
          y += dot(h.data() + b * a.bn, w2 + r * a.N + b * a.bn, a.bn, lut) * s2[(r / a.bk) * nb + b];
        acc[static_cast<size_t>(r)] += wt * y;
      }
    }
    for (int64_t r = 0; r < a.H; ++r) a.out[t * a.H + r] = to_e4m3(acc[static_cast<size_t>(r)], lut);
  }
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
  const int64_t bn = atrex_param_int(launch, "scale_block_n", 128);
  const int64_t bk = atrex_param_int(launch, "scale_block_k", 128);
  if (bn < 1 || bk < 1 || H % bk != 0 || N % bn != 0 || w1->shape[2] != H || w2->shape[0] != E ||
      w2->shape[1] != H || w2->shape[2] != N || w1->shape[1] != 2 * N || ids->shape[0] != T ||
      as->shape[1] != H / bk || s1->shape[1] != 2 * N / bn || s1->shape[2] != H / bk ||
      s2->shape[1] != H / bk || s2->shape[2] != N / bn)
    return fail("fp8_blockscale_fused_moe: inconsistent dims or scale blocks (bn %lld, bk %lld)",
                static_cast<long long>(bn), static_cast<long long>(bk));
  static const Lut lut;
  Args a{static_cast<const uint8_t*>(x->data), static_cast<const uint8_t*>(w1->data),
         static_cast<const uint8_t*>(w2->data), static_cast<const float*>(tw->data),
         static_cast<const float*>(as->data), static_cast<const float*>(s1->data),
         static_cast<const float*>(s2->data), static_cast<const int32_t*>(ids->data),
         static_cast<uint8_t*>(out->data), H, N, E, ids->shape[1], bn, bk};
  parallel_rows(T, a.k * 3 * N * H, THREADS, 1 << 20,
                [&](int64_t b, int64_t e) { do_tokens(a, lut, b, e); });
  return 0;
}
