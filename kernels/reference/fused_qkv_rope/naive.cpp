// fused_qkv_rope reference re-expressed as a cpu candidate (atrex candidate ABI v1): split
// qkv [T, (Hq + 2 Hkv) D] into q, k, v and rotate the first rope_dim lanes of q and k NeoX
// style by position / rope_base^(2i / rope_dim); bf16 or fp16 by qkv's dtype; fp32 arithmetic.
#include <cmath>
#include <cstring>

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

float load(const uint16_t* p, int64_t i, bool fp16) {
  if (!fp16) return bf16_to_float(p[i]);
  _Float16 h;
  std::memcpy(&h, p + i, 2);
  return static_cast<float>(h);
}

void store(uint16_t* p, int64_t i, float v, bool fp16) {
  if (!fp16) {
    p[i] = float_to_bf16(v);
    return;
  }
  const _Float16 h = static_cast<_Float16>(v);
  std::memcpy(p + i, &h, 2);
}

}  // namespace

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* qkv = atrex_input(launch, "qkv");
  const DLTensor* pos = atrex_input(launch, "positions");
  const DLTensor* outs[3] = {atrex_output(launch, "q"), atrex_output(launch, "k"),
                             atrex_output(launch, "v")};
  if (!qkv || !pos || !outs[0] || !outs[1] || !outs[2]) return 1;
  const bool fp16 = qkv->dtype.code == kDLFloat;
  const int64_t tokens = qkv->shape[0];
  const int64_t hq = atrex_param_int(launch, "num_heads", 0),
                hkv = atrex_param_int(launch, "num_kv_heads", 0);
  const int64_t dim = atrex_param_int(launch, "head_dim", 0),
                rope = atrex_param_int(launch, "rope_dim", dim);
  const float base = static_cast<float>(atrex_param_float(launch, "rope_base", 10000.0));
  const int64_t half = rope / 2, heads = hq + 2 * hkv;
  const auto* x = static_cast<const uint16_t*>(qkv->data);
  const auto* p = static_cast<const int32_t*>(pos->data);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      const int which = h < hq ? 0 : (h < hq + hkv ? 1 : 2);
      const int64_t local = which == 0 ? h : (which == 1 ? h - hq : h - hq - hkv);
      const int64_t nh = which == 0 ? hq : hkv;
      auto* dst = static_cast<uint16_t*>(outs[which]->data) + (t * nh + local) * dim;
      const int64_t src = (t * heads + h) * dim;
      for (int64_t d = 0; d < dim; ++d) {
        if (which == 2 || d >= rope) {
          dst[d] = x[src + d];
          continue;
        }
        const int64_t f = d % half;
        const float angle =
            static_cast<float>(p[t]) *
            (1.0f / std::pow(base, static_cast<float>(2 * f) / static_cast<float>(rope)));
        const float other =
            d < half ? -load(x, src + d + half, fp16) : load(x, src + d - half, fp16);
        store(dst, d, load(x, src + d, fp16) * std::cos(angle) + other * std::sin(angle), fp16);
      }
    }
  }
  return 0;
}
