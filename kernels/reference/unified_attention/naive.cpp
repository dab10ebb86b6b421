// Reference re-expressed as a cpu candidate: unified_attention.
// q [T, Hq, d] bf16; k_cache, v_cache [num_blocks, bs, Hkv, d] bf16; cu_seqlens_q [S + 1],
// seqused_k [S], block_table [S, max_blocks] int32. Key j of sequence s is cache slot
// block_table[s, j / bs] * bs + j % bs; query head h reads kv head h / (Hq / Hkv). Causal when
// the sequence's q_len == kv_len. out = bf16(softmax(q k^T / sqrt(d)) v), fp32 arithmetic.
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
  const DLTensor* kc = atrex_input(launch, "k_cache");
  const DLTensor* vc = atrex_input(launch, "v_cache");
  const DLTensor* cu = atrex_input(launch, "cu_seqlens_q");
  const DLTensor* used = atrex_input(launch, "seqused_k");
  const DLTensor* table = atrex_input(launch, "block_table");
  const DLTensor* out = atrex_output(launch, "out");
  if (!q || !kc || !vc || !cu || !used || !table || !out || q->ndim != 3 || kc->ndim != 4) return 1;
  const int64_t hq = q->shape[1], dim = q->shape[2], bs = kc->shape[1], hkv = kc->shape[2];
  const int64_t seqs = used->shape[0], max_blocks = table->shape[1];
  const auto* qs = static_cast<const uint16_t*>(q->data);
  const auto* ks = static_cast<const uint16_t*>(kc->data);
  const auto* vs = static_cast<const uint16_t*>(vc->data);
  const auto* cq = static_cast<const int32_t*>(cu->data);
  const auto* kl = static_cast<const int32_t*>(used->data);
  const auto* bt = static_cast<const int32_t*>(table->data);
  auto* os = static_cast<uint16_t*>(out->data);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(dim)));
  std::vector<float> p, acc(static_cast<size_t>(dim));
  std::vector<int64_t> slot;
  for (int64_t s = 0; s < seqs; ++s) {
    const int64_t q_len = cq[s + 1] - cq[s], kv_len = kl[s];
    slot.resize(static_cast<size_t>(kv_len));
    for (int64_t j = 0; j < kv_len; ++j)
      slot[j] = static_cast<int64_t>(bt[s * max_blocks + j / bs]) * bs + j % bs;
    p.resize(static_cast<size_t>(kv_len));
    for (int64_t t = 0; t < q_len; ++t) {
      const int64_t nk = q_len == kv_len ? t + 1 : kv_len;
      for (int64_t h = 0; h < hq; ++h) {
        const int64_t kvh = h / (hq / hkv);
        const uint16_t* qr = qs + ((cq[s] + t) * hq + h) * dim;
        float mx = -INFINITY;
        for (int64_t j = 0; j < nk; ++j) {
          const uint16_t* kr = ks + (slot[j] * hkv + kvh) * dim;
          float dot = 0;
          for (int64_t i = 0; i < dim; ++i) dot += bf16_to_float(qr[i]) * bf16_to_float(kr[i]);
          p[j] = dot * scale;
          mx = std::fmax(mx, p[j]);
        }
        float sum = 0;
        for (int64_t j = 0; j < nk; ++j) sum += (p[j] = std::exp(p[j] - mx));
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (int64_t j = 0; j < nk; ++j) {
          const uint16_t* vr = vs + (slot[j] * hkv + kvh) * dim;
          for (int64_t i = 0; i < dim; ++i) acc[i] += p[j] * bf16_to_float(vr[i]);
        }
        uint16_t* orow = os + ((cq[s] + t) * hq + h) * dim;
        for (int64_t i = 0; i < dim; ++i) orow[i] = float_to_bf16(nk ? acc[i] / sum : 0.0f);
      }
    }
  }
  return 0;
}
