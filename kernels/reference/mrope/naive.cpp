// mrope reference re-expressed as a cpu candidate (atrex candidate ABI v1): Qwen-VL M-RoPE of
// q [T, Hq * hs] and k [T, Hkv * hs] (bf16) with per-axis cos/sin tables [3, T, rot / 2] (fp32).
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

struct Sections {
  int64_t s[3];
  bool interleaved;
  int64_t axis(int64_t f) const {
    if (interleaved) {
      if (f % 3 == 1 && f <= 3 * s[1]) return 1;
      if (f % 3 == 2 && f <= 3 * s[2]) return 2;
      return 0;
    }
    return f < s[0] ? 0 : (f < s[0] + s[1] ? 1 : 2);
  }
};

void rotate(const DLTensor* in, const DLTensor* out, const float* cs, const float* sn,
            const Sections& sec, int64_t hs, int64_t rot, bool neox) {
  const int64_t tokens = in->shape[0], heads = in->shape[1] / hs, half = rot / 2;
  const auto* x = static_cast<const uint16_t*>(in->data);
  auto* y = static_cast<uint16_t*>(out->data);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t base = (t * heads + h) * hs;
      for (int64_t d = rot; d < hs; ++d) y[base + d] = x[base + d];
      for (int64_t f = 0; f < half; ++f) {
        const int64_t at = (sec.axis(f) * tokens + t) * half + f;
        const int64_t i1 = base + (neox ? f : 2 * f), i2 = base + (neox ? f + half : 2 * f + 1);
        const float a = bf16_to_float(x[i1]), b = bf16_to_float(x[i2]);
        y[i1] = float_to_bf16(a * cs[at] - b * sn[at]);
        y[i2] = float_to_bf16(b * cs[at] + a * sn[at]);
      }
    }
  }
}

}  // namespace

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* q = atrex_input(launch, "q");
  const DLTensor* k = atrex_input(launch, "k");
  const DLTensor* c = atrex_input(launch, "cos");
  const DLTensor* s = atrex_input(launch, "sin");
  const DLTensor* qo = atrex_output(launch, "q");
  const DLTensor* ko = atrex_output(launch, "k");
  const AtrexParam* section = atrex_param(launch, "mrope_section");
  if (!q || !k || !c || !s || !qo || !ko || !section || section->int_list_length != 3) return 1;
  Sections sec{{section->int_list[0], section->int_list[1], section->int_list[2]},
               atrex_param_int(launch, "mrope_interleaved", 0) != 0};
  const int64_t hs = atrex_param_int(launch, "head_size", 0),
                rot = atrex_param_int(launch, "rotary_dim", hs);
  const bool neox = atrex_param_int(launch, "is_neox_style", 1) != 0;
  const auto* cs = static_cast<const float*>(c->data);
  const auto* sn = static_cast<const float*>(s->data);
  rotate(q, qo, cs, sn, sec, hs, rot, neox);
  rotate(k, ko, cs, sn, sec, hs, rot, neox);
  return 0;
}
