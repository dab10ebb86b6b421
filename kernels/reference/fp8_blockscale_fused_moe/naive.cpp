// Reference re-expressed as a cpu candidate: fp8_blockscale_fused_moe.
// Dequantise in fp32: x = fp8(hidden_states) * a_scale[t, h/bk], W1 = fp8(w1) * fc1_scale[e, r/bn,
// h/bk], W2 = fp8(w2) * fc2_scale[e, h/bk, n/bn]; per token and slot act = silu(W1g . x) * (W1u .
// x), y = W2 . act; out = fp8(sum_j topk_weights[t, j] * y) with torch's cast (past 464 -> NaN).
#include <algorithm>
#include <cmath>
#include <thread>
#include <vector>

#include "atrex/candidate.h"

static float fp8_to_float(uint8_t v) {
  const int e = (v >> 3) & 15, m = v & 7;
  const float mag = e ? std::ldexp(1.0f + m / 8.0f, e - 7) : std::ldexp(static_cast<float>(m), -9);
  return (v & 0x80) ? -mag : mag;
}

// Round to nearest even on the e4m3fn grid; what rounds past 448 becomes NaN (0x7f), as torch.
static uint8_t float_to_fp8(float f) {
  const uint8_t sign = std::signbit(f) ? 0x80 : 0x00;
  const float a = std::fabs(f);
  if (!(a < 480.0f)) return sign | 0x7f;
  if (a < 0.015625f)
    return sign | static_cast<uint8_t>(std::nearbyint(a * 512.0f));  // 8 is the smallest normal
  int e;
  std::frexp(a, &e);                                     // a in [2^(e-1), 2^e)
  const float q = std::nearbyint(std::ldexp(a, 4 - e));  // 8..16: 1.mmm scaled by 8
  const int exp_field = (q == 16.0f ? e : e - 1) + 7;
  const int man = q == 16.0f ? 0 : static_cast<int>(q) - 8;
  if (exp_field > 15 || (exp_field == 15 && man == 7)) return sign | 0x7f;
  return sign | static_cast<uint8_t>(exp_field << 3 | man);
}

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* xs = atrex_input(launch, "hidden_states");
  const DLTensor* w1s = atrex_input(launch, "w1");
  const DLTensor* w2s = atrex_input(launch, "w2");
  const DLTensor* ws = atrex_input(launch, "topk_weights");
  const DLTensor* ids = atrex_input(launch, "topk_ids");
  const DLTensor* a_scale = atrex_input(launch, "a_scale");
  const DLTensor* fc1 = atrex_input(launch, "fc1_scale");
  const DLTensor* fc2 = atrex_input(launch, "fc2_scale");
  const DLTensor* outs = atrex_output(launch, "out");
  const int64_t bn = atrex_param_int(launch, "scale_block_n", 128),
                bk = atrex_param_int(launch, "scale_block_k", 128);
  if (!xs || !w1s || !w2s || !ws || !ids || !a_scale || !fc1 || !fc2 || !outs || w2s->ndim != 3)
    return 1;
  const int64_t tokens = xs->shape[0], hidden = xs->shape[1], inter = w2s->shape[2],
                experts = w2s->shape[0];
  const int64_t k = ids->shape[1], hb = hidden / bk, nb = inter / bn;
  const auto* x = static_cast<const uint8_t*>(xs->data);
  const auto* w1 = static_cast<const uint8_t*>(w1s->data);
  const auto* w2 = static_cast<const uint8_t*>(w2s->data);
  const auto* w = static_cast<const float*>(ws->data);
  const auto* id = static_cast<const int32_t*>(ids->data);
  const auto* as = static_cast<const float*>(a_scale->data);
  const auto* s1 = static_cast<const float*>(fc1->data);
  const auto* s2 = static_cast<const float*>(fc2->data);
  auto* out = static_cast<uint8_t*>(outs->data);
  for (int64_t i = 0; i < tokens * k; ++i) {
    if (id[i] < 0 || id[i] >= experts) return 2;
  }
  auto work = [&](int64_t t0, int64_t t1) {
    std::vector<float> xf(static_cast<size_t>(hidden)), act(static_cast<size_t>(inter)),
        acc(static_cast<size_t>(hidden));
    for (int64_t t = t0; t < t1; ++t) {
      for (int64_t h = 0; h < hidden; ++h)
        xf[h] = fp8_to_float(x[t * hidden + h]) * as[t * hb + h / bk];
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t j = 0; j < k; ++j) {
        const int64_t e = id[t * k + j];
        for (int64_t n = 0; n < inter; ++n) {
          const int64_t rg = e * 2 * inter + n, ru = rg + inter;
          float gate = 0, up = 0;
          for (int64_t h = 0; h < hidden; ++h) {
            gate += xf[h] * (fp8_to_float(w1[rg * hidden + h]) * s1[(rg / bn) * hb + h / bk]);
            up += xf[h] * (fp8_to_float(w1[ru * hidden + h]) * s1[(ru / bn) * hb + h / bk]);
          }
          act[n] = gate / (1.0f + std::exp(-gate)) * up;
        }
        for (int64_t h = 0; h < hidden; ++h) {
          const int64_t r = e * hidden + h;
          float y = 0;
          for (int64_t n = 0; n < inter; ++n)
            y += act[n] * (fp8_to_float(w2[r * inter + n]) * s2[(r / bk) * nb + n / bn]);
          acc[h] += y * w[t * k + j];
        }
      }
      for (int64_t h = 0; h < hidden; ++h) out[t * hidden + h] = float_to_fp8(acc[h]);
    }
  };
  const int64_t threads =
      std::max<int64_t>(1, std::min<int64_t>(std::thread::hardware_concurrency(), tokens));
  std::vector<std::thread> pool;
  for (int64_t i = 0; i < threads; ++i)
    pool.emplace_back(work, tokens * i / threads, tokens * (i + 1) / threads);
  for (auto& th : pool) th.join();
  return 0;
}
