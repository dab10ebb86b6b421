// Fault candidate (docs/evaluation.md "Edge-case inputs"): paged_attention_decode that ignores
// block_tables and reads key j of sequence s from block s * max_blocks + j / bs, as if every
// sequence owned its blocks in order. The usual draws' block tables are exactly that (the
// identity), so it passes every seed; the edge-case set (a seeded permutation of the cache's
// blocks, and lengths cut to partial last blocks) makes it read other sequences' keys, so it must
// be `wrong_result` there. Otherwise kernels/reference/paged_attention_decode/naive.cpp, its
// honest twin:
//
// paged_attention_decode.
// query [B, Hq, d]; k_cache [num_blocks, Hkv, d/8, bs, 8]; v_cache [num_blocks, Hkv, d, bs]
// (bf16 or fp16, the tensors' dtype); block_tables [B, max_blocks], seq_lens [B] int32. Key j
// of sequence s is position j % bs of block block_tables[s, j / bs]; query head h reads kv head
// h / (Hq / Hkv). out = softmax(q k^T / sqrt(d)) v in fp32, rounded to the query dtype.
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

// _Float16 (GCC >= 12, Clang on x86-64) converts with IEEE round to nearest even.
static float fp16_to_float(uint16_t u) {
  _Float16 h;
  std::memcpy(&h, &u, 2);
  return static_cast<float>(h);
}
static uint16_t float_to_fp16(float f) {
  const _Float16 h = static_cast<_Float16>(f);  // round to nearest even
  uint16_t u;
  std::memcpy(&u, &h, 2);
  return u;
}

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* query = atrex_input(launch, "query");
  const DLTensor* kc = atrex_input(launch, "k_cache");
  const DLTensor* vc = atrex_input(launch, "v_cache");
  const DLTensor* table = atrex_input(launch, "block_tables");
  const DLTensor* lens = atrex_input(launch, "seq_lens");
  const DLTensor* out = atrex_output(launch, "out");
  if (!query || !kc || !vc || !table || !lens || !out || query->ndim != 3 || vc->ndim != 4)
    return 1;
  const bool fp16 = query->dtype.code == kDLFloat;
  auto load = [fp16](uint16_t x) { return fp16 ? fp16_to_float(x) : bf16_to_float(x); };
  const int64_t seqs = query->shape[0], hq = query->shape[1], dim = query->shape[2];
  const int64_t hkv = vc->shape[1], bs = vc->shape[3], max_blocks = table->shape[1];
  const auto* qs = static_cast<const uint16_t*>(query->data);
  const auto* ks = static_cast<const uint16_t*>(kc->data);
  const auto* vs = static_cast<const uint16_t*>(vc->data);
  const auto* sl = static_cast<const int32_t*>(lens->data);
  auto* os = static_cast<uint16_t*>(out->data);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(dim)));
  std::vector<float> p, acc(static_cast<size_t>(dim));
  for (int64_t s = 0; s < seqs; ++s) {
    const int64_t nk = sl[s] > 0 ? sl[s] : 0;
    p.resize(static_cast<size_t>(nk));
    for (int64_t h = 0; h < hq; ++h) {
      const int64_t kvh = h / (hq / hkv);
      const uint16_t* qr = qs + (s * hq + h) * dim;
      float mx = -INFINITY;
      for (int64_t j = 0; j < nk; ++j) {
        const int64_t base = ((s * max_blocks + j / bs) * hkv + kvh) * dim * bs;
        float dot = 0;
        for (int64_t i = 0; i < dim; ++i)
          dot += load(qr[i]) * load(ks[base + (i / 8) * bs * 8 + (j % bs) * 8 + i % 8]);
        p[j] = dot * scale;
        mx = std::fmax(mx, p[j]);
      }
      float sum = 0;
      for (int64_t j = 0; j < nk; ++j) sum += (p[j] = std::exp(p[j] - mx));
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t j = 0; j < nk; ++j) {
        const int64_t base = ((s * max_blocks + j / bs) * hkv + kvh) * dim * bs;
        for (int64_t i = 0; i < dim; ++i) acc[i] += p[j] * load(vs[base + i * bs + j % bs]);
      }
      for (int64_t i = 0; i < dim; ++i) {
        const float o = nk ? acc[i] / sum : 0.0f;
        os[(s * hq + h) * dim + i] = fp16 ? float_to_fp16(o) : float_to_bf16(o);
      }
    }
  }
  return 0;
}
