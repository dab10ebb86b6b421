// Reference re-expressed as a cpu candidate: attention_forward.
// q, k, v [T, H, d] bf16 packed by cu_seqlens_q / cu_seqlens_k [S + 1] int32; for each sequence
// and head, out = bf16(softmax(q k^T / sqrt(d)) v) over that sequence's keys (no mask), fp32.
#include <cmath>
#include <cstring>
#include <vector>

#include "atrex/candidate.h"

static float bf16_to_float(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round to nearest even (outputs here are finite).
static uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* q = atrex_input(launch, "q");
  const DLTensor* k = atrex_input(launch, "k");
  const DLTensor* v = atrex_input(launch, "v");
  const DLTensor* cu_q = atrex_input(launch, "cu_seqlens_q");
  const DLTensor* cu_k = atrex_input(launch, "cu_seqlens_k");
  const DLTensor* out = atrex_output(launch, "out");
  if (!q || !k || !v || !cu_q || !cu_k || !out || q->ndim != 3) return 1;
  const int64_t heads = q->shape[1], dim = q->shape[2], seqs = cu_q->shape[0] - 1;
  const auto* qs = static_cast<const uint16_t*>(q->data);
  const auto* ks = static_cast<const uint16_t*>(k->data);
  const auto* vs = static_cast<const uint16_t*>(v->data);
  const auto* cq = static_cast<const int32_t*>(cu_q->data);
  const auto* ck = static_cast<const int32_t*>(cu_k->data);
  auto* os = static_cast<uint16_t*>(out->data);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(dim)));
  std::vector<float> p, acc(static_cast<size_t>(dim));
  for (int64_t s = 0; s < seqs; ++s) {
    const int64_t k0 = ck[s], nk = ck[s + 1] - ck[s];
    p.resize(static_cast<size_t>(nk));
    for (int64_t t = cq[s]; t < cq[s + 1]; ++t) {
      for (int64_t h = 0; h < heads; ++h) {
        const uint16_t* qr = qs + (t * heads + h) * dim;
        float mx = -INFINITY;
        for (int64_t j = 0; j < nk; ++j) {
          const uint16_t* kr = ks + ((k0 + j) * heads + h) * dim;
          float dot = 0;
          for (int64_t i = 0; i < dim; ++i) dot += bf16_to_float(qr[i]) * bf16_to_float(kr[i]);
          p[j] = dot * scale;
          mx = std::fmax(mx, p[j]);
        }
        float sum = 0;
        for (int64_t j = 0; j < nk; ++j) sum += (p[j] = std::exp(p[j] - mx));
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (int64_t j = 0; j < nk; ++j) {
          const uint16_t* vr = vs + ((k0 + j) * heads + h) * dim;
          for (int64_t i = 0; i < dim; ++i) acc[i] += p[j] * bf16_to_float(vr[i]);
        }
        for (int64_t i = 0; i < dim; ++i)
          os[(t * heads + h) * dim + i] = float_to_bf16(nk ? acc[i] / sum : 0.0f);
      }
    }
  }
  return 0;
}
