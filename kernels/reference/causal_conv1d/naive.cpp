// causal_conv1d reference re-expressed as a cpu candidate (atrex candidate ABI v1): depthwise
// causal conv of x [dim, T] after initial_state [1, dim, width - 1], + bias, silu (bf16 I/O,
// fp32 arithmetic, the conv rounded to bf16 before the activation).
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

}  // namespace

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* x = atrex_input(launch, "x");
  const DLTensor* w = atrex_input(launch, "weight");
  const DLTensor* b = atrex_input(launch, "bias");
  const DLTensor* st = atrex_input(launch, "initial_state");
  const DLTensor* out = atrex_output(launch, "out");
  if (!x || !w || !b || !st || !out) return 1;
  const int64_t dim = x->shape[0], tokens = x->shape[1], width = w->shape[1];
  const AtrexParam* act = atrex_param(launch, "activation");
  const bool silu = !act || std::strcmp(act->string_value, "none") != 0;
  const auto* xs = static_cast<const uint16_t*>(x->data);
  const auto* ws = static_cast<const uint16_t*>(w->data);
  const auto* bs = static_cast<const uint16_t*>(b->data);
  const auto* ss = static_cast<const uint16_t*>(st->data);
  auto* os = static_cast<uint16_t*>(out->data);
  for (int64_t d = 0; d < dim; ++d) {
    for (int64_t t = 0; t < tokens; ++t) {
      float acc = bf16_to_float(bs[d]);
      for (int64_t j = 0; j < width; ++j) {
        const int64_t p = t + j - (width - 1);  // < 0: inside the initial state
        const uint16_t v = p < 0 ? ss[d * (width - 1) + (width - 1) + p] : xs[d * tokens + p];
        acc += bf16_to_float(ws[d * width + j]) * bf16_to_float(v);
      }
      const float conv = bf16_to_float(float_to_bf16(acc));
      os[d * tokens + t] = float_to_bf16(silu ? conv / (1.0f + std::exp(-conv)) : conv);
    }
  }
  return 0;
}
