// Reference re-expressed as a cpu candidate: fused_moe.
// hidden_states [T, H] bf16, w1 [E, 2N, H] bf16 (gate rows then up rows), w2 [E, H, N] bf16,
// topk_weights [T, k] fp32, topk_ids [T, k] int32 -> out [T, H] fp32 =
//   sum_j topk_weights[t, j] * W2[e] . (silu(W1[e, :N] . x) * (W1[e, N:] . x)), e = topk_ids[t, j],
// token by token, all arithmetic in fp32 (as torch's fp32 GEMMs).
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include "atrex/candidate.h"

static float bf16_to_float(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* xs = atrex_input(launch, "hidden_states");
  const DLTensor* w1s = atrex_input(launch, "w1");
  const DLTensor* w2s = atrex_input(launch, "w2");
  const DLTensor* ws = atrex_input(launch, "topk_weights");
  const DLTensor* ids = atrex_input(launch, "topk_ids");
  const DLTensor* outs = atrex_output(launch, "out");
  if (!xs || !w1s || !w2s || !ws || !ids || !outs || w2s->ndim != 3 || ids->ndim != 2) return 1;
  const int64_t tokens = xs->shape[0], hidden = xs->shape[1], inter = w2s->shape[2],
                experts = w2s->shape[0];
  const int64_t k = ids->shape[1];
  const auto* x = static_cast<const uint16_t*>(xs->data);
  const auto* w1 = static_cast<const uint16_t*>(w1s->data);
  const auto* w2 = static_cast<const uint16_t*>(w2s->data);
  const auto* w = static_cast<const float*>(ws->data);
  const auto* id = static_cast<const int32_t*>(ids->data);
  auto* out = static_cast<float*>(outs->data);
  for (int64_t i = 0; i < tokens * k; ++i) {
    if (id[i] < 0 || id[i] >= experts) return 2;
  }
  auto work = [&](int64_t t0, int64_t t1) {
    std::vector<float> xf(static_cast<size_t>(hidden)), act(static_cast<size_t>(inter));
    for (int64_t t = t0; t < t1; ++t) {
      for (int64_t h = 0; h < hidden; ++h) xf[h] = bf16_to_float(x[t * hidden + h]);
      for (int64_t h = 0; h < hidden; ++h) out[t * hidden + h] = 0.0f;
      for (int64_t j = 0; j < k; ++j) {
        const int64_t e = id[t * k + j];
        for (int64_t n = 0; n < inter; ++n) {
          const uint16_t* g = w1 + (e * 2 * inter + n) * hidden;
          const uint16_t* u = g + inter * hidden;
          float gate = 0, up = 0;
          for (int64_t h = 0; h < hidden; ++h) {
            gate += xf[h] * bf16_to_float(g[h]);
            up += xf[h] * bf16_to_float(u[h]);
          }
          act[n] = gate / (1.0f + std::exp(-gate)) * up;
        }
        for (int64_t h = 0; h < hidden; ++h) {
          const uint16_t* row = w2 + (e * hidden + h) * inter;
          float y = 0;
          for (int64_t n = 0; n < inter; ++n) y += act[n] * bf16_to_float(row[n]);
          out[t * hidden + h] += y * w[t * k + j];
        }
      }
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
