// Reference re-expressed as a cpu candidate: mla_decode_attention.
// q [B, H, r + rope] bf16; kv_cache [sum(seq_lens), 1, r + rope] bf16, sequence b owning rows
// sum(seq_lens[:b]) .. + seq_lens[b]; seq_lens [B] int32. Keys are whole rows, values their first
// r = kv_lora_rank elements; out [B, H, r] = bf16(softmax(q k^T / sqrt(r + rope)) v), fp32.
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
  const DLTensor* kv = atrex_input(launch, "kv_cache");
  const DLTensor* lens = atrex_input(launch, "seq_lens");
  const DLTensor* out = atrex_output(launch, "out");
  if (!q || !kv || !lens || !out || q->ndim != 3 || out->ndim != 3) return 1;
  const int64_t batch = q->shape[0], heads = q->shape[1], qk = q->shape[2], rank = out->shape[2];
  const auto* qs = static_cast<const uint16_t*>(q->data);
  const auto* kvs = static_cast<const uint16_t*>(kv->data);
  const auto* sl = static_cast<const int32_t*>(lens->data);
  auto* os = static_cast<uint16_t*>(out->data);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(qk)));
  std::vector<float> p, acc(static_cast<size_t>(rank));
  int64_t start = 0;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t nk = sl[b];
    p.resize(static_cast<size_t>(nk));
    for (int64_t h = 0; h < heads; ++h) {
      const uint16_t* qr = qs + (b * heads + h) * qk;
      float mx = -INFINITY;
      for (int64_t j = 0; j < nk; ++j) {
        const uint16_t* kr = kvs + (start + j) * qk;
        float dot = 0;
        for (int64_t i = 0; i < qk; ++i) dot += bf16_to_float(qr[i]) * bf16_to_float(kr[i]);
        p[j] = dot * scale;
        mx = std::fmax(mx, p[j]);
      }
      float sum = 0;
      for (int64_t j = 0; j < nk; ++j) sum += (p[j] = std::exp(p[j] - mx));
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t j = 0; j < nk; ++j) {
        const uint16_t* vr = kvs + (start + j) * qk;
        for (int64_t i = 0; i < rank; ++i) acc[i] += p[j] * bf16_to_float(vr[i]);
      }
      for (int64_t i = 0; i < rank; ++i)
        os[(b * heads + h) * rank + i] = float_to_bf16(nk ? acc[i] / sum : 0.0f);
    }
    start += nk;
  }
  return 0;
}
