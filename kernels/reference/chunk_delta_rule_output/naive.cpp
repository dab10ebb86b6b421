// chunk_delta_rule_output reference re-expressed as a cpu candidate (atrex candidate ABI v1):
// FLA chunk_fwd_o. Per chunk and v head: o = (q h_c * exp(g) + bf16(masked q k^T * exp(g_t -
// g_s)) v) * scale with fp32 accumulation; q/k heads shared over groups of v heads.
#include <cmath>
#include <cstring>
#include <vector>

#include "atrex/candidate.h"

namespace {

float bf16_to_float(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

}  // namespace

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* q = atrex_input(launch, "q");
  const DLTensor* k = atrex_input(launch, "k");
  const DLTensor* v = atrex_input(launch, "v");
  const DLTensor* h = atrex_input(launch, "h");
  const DLTensor* g = atrex_input(launch, "g");
  const DLTensor* out = atrex_output(launch, "out");
  if (!q || !k || !v || !h || !g || !out) return 1;
  const int64_t batch = q->shape[0], tokens = q->shape[1], hq = q->shape[2], dk = q->shape[3];
  const int64_t hv = v->shape[2], dv = v->shape[3], chunks = h->shape[1];
  const int64_t cs = atrex_param_int(launch, "chunk_size", 64);
  const float scale = static_cast<float>(
      atrex_param_float(launch, "scale", 1.0 / std::sqrt(static_cast<double>(dk))));
  const int64_t per = hv / hq > 1 ? hv / hq : 1;
  const auto* qs = static_cast<const uint16_t*>(q->data);
  const auto* ks = static_cast<const uint16_t*>(k->data);
  const auto* vs = static_cast<const uint16_t*>(v->data);
  const auto* hs = static_cast<const uint16_t*>(h->data);
  const auto* gs = static_cast<const float*>(g->data);
  auto* os = static_cast<uint16_t*>(out->data);
  std::vector<float> attn(static_cast<size_t>(cs)), acc(static_cast<size_t>(dv));
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t head = 0; head < hv; ++head) {
        const int64_t qh = head / per < hq - 1 ? head / per : hq - 1;
        const int64_t c = t / cs, start = c * cs;
        const uint16_t* qrow = qs + ((b * tokens + t) * hq + qh) * dk;
        const float gt = gs[(b * tokens + t) * hv + head];
        for (int64_t s = start; s <= t; ++s) {
          const uint16_t* krow = ks + ((b * tokens + s) * hq + qh) * dk;
          float dot = 0;
          for (int64_t d = 0; d < dk; ++d) dot += bf16_to_float(qrow[d]) * bf16_to_float(krow[d]);
          const float gd = gt - gs[(b * tokens + s) * hv + head];
          attn[s - start] = gd <= 0 ? bf16_to_float(float_to_bf16(dot * std::exp(gd))) : 0.0f;
        }
        const uint16_t* hc = hs + ((b * chunks + c) * hv + head) * dk * dv;
        for (int64_t j = 0; j < dv; ++j) acc[j] = 0;
        for (int64_t d = 0; d < dk; ++d) {
          const float qd = bf16_to_float(qrow[d]);
          for (int64_t j = 0; j < dv; ++j) acc[j] += qd * bf16_to_float(hc[d * dv + j]);
        }
        const float eg = std::exp(gt);
        for (int64_t j = 0; j < dv; ++j) acc[j] *= eg;
        for (int64_t s = start; s <= t; ++s) {
          const uint16_t* vrow = vs + ((b * tokens + s) * hv + head) * dv;
          for (int64_t j = 0; j < dv; ++j) acc[j] += attn[s - start] * bf16_to_float(vrow[j]);
        }
        uint16_t* orow = os + ((b * tokens + t) * hv + head) * dv;
        for (int64_t j = 0; j < dv; ++j) orow[j] = float_to_bf16(acc[j] * scale);
      }
    }
  }
  return 0;
}
