// Reference re-expressed as a cpu candidate: fused_qk_rmsnorm.
// hidden_states [T, (Hq + 2 Hkv) d] fp16 = [q | k | v]: each q and k head becomes
// fp16(w * fp16(x * rsqrt(mean(x^2) + eps))) with q_weight / k_weight [d]; v is copied.
#include <cmath>
#include <cstring>

#include "atrex/candidate.h"

static float fp16_to_float(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    const float v = std::ldexp(static_cast<float>(man), -24);
    return sign ? -v : v;
  }
  u = exp == 31 ? (sign | 0x7f800000u | (man << 13)) : (sign | ((exp + 112u) << 23) | (man << 13));
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round to nearest even (finite inputs well inside the fp16 range here).
static uint16_t float_to_fp16(float f) {
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const float a = std::fabs(f);
  if (a < 6.103515625e-05f)
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(a * 16777216.0f)));
  int e;
  std::frexp(a, &e);  // a in [2^(e-1), 2^e)
  const float step = std::ldexp(1.0f, e - 12);
  const float r = std::nearbyint(a / step) * step;  // may carry into the next binade
  std::frexp(r, &e);
  const uint32_t exp_field = static_cast<uint32_t>(e - 1 + 15);
  const uint32_t man = static_cast<uint32_t>(std::ldexp(r, -(e - 1)) * 1024.0f) - 1024u;
  return static_cast<uint16_t>(sign | (exp_field << 10) | man);
}

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* hs = atrex_input(launch, "hidden_states");
  const DLTensor* qw = atrex_input(launch, "q_weight");
  const DLTensor* kw = atrex_input(launch, "k_weight");
  const DLTensor* out = atrex_output(launch, "out");
  if (!hs || !qw || !kw || !out || hs->ndim != 2) return 1;
  const int64_t heads = atrex_param_int(launch, "head_num", 0),
                kv_heads = atrex_param_int(launch, "kv_head_num", 0);
  const int64_t d = qw->shape[0], slots = heads + 2 * kv_heads;
  if (slots * d != hs->shape[1]) return 2;
  const float eps = static_cast<float>(atrex_param_float(launch, "eps", 1e-6));
  const auto* x = static_cast<const uint16_t*>(hs->data);
  const auto* qws = static_cast<const uint16_t*>(qw->data);
  const auto* kws = static_cast<const uint16_t*>(kw->data);
  auto* o = static_cast<uint16_t*>(out->data);
  for (int64_t unit = 0; unit < hs->shape[0] * slots; ++unit) {
    const int64_t slot = unit % slots, base = unit * d;
    if (slot >= heads + kv_heads) {
      std::memcpy(o + base, x + base, static_cast<size_t>(d) * 2);
      continue;
    }
    const uint16_t* w = slot < heads ? qws : kws;
    double sum_sq = 0;
    for (int64_t j = 0; j < d; ++j)
      sum_sq += static_cast<double>(fp16_to_float(x[base + j])) * fp16_to_float(x[base + j]);
    const float r = 1.0f / std::sqrt(static_cast<float>(sum_sq / static_cast<double>(d)) + eps);
    for (int64_t j = 0; j < d; ++j) {
      const float normed = fp16_to_float(float_to_fp16(fp16_to_float(x[base + j]) * r));
      o[base + j] = float_to_fp16(fp16_to_float(w[j]) * normed);
    }
  }
  return 0;
}
