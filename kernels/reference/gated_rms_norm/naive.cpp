// Reference re-expressed as a cpu candidate: gated_rms_norm.
// norm_before_gate: out = bf16((x * rsqrt(mean(x^2) + eps)) * w * act(z)); else the gated x
// (x * act(z)) is normalised. act: silu / swish or sigmoid. fp32 arithmetic, one rounding.
#include <cmath>
#include <cstring>
#include <string>

#include "atrex/candidate.h"

static float bf16_to_float(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round to nearest even (inputs here are finite).
static uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
static float round_bf16(float f) { return bf16_to_float(float_to_bf16(f)); }

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* x = atrex_input(launch, "x");
  const DLTensor* weight = atrex_input(launch, "weight");
  const DLTensor* z = atrex_input(launch, "z");
  const DLTensor* out = atrex_output(launch, "out");
  if (!x || !weight || !z || !out || x->ndim != 2) return 1;
  const int64_t rows = x->shape[0], hidden = x->shape[1];
  const float eps = static_cast<float>(atrex_param_float(launch, "eps", 1e-6));
  const bool norm_before_gate = atrex_param_int(launch, "norm_before_gate", 1) != 0;
  const AtrexParam* act_param = atrex_param(launch, "activation");
  const std::string act_name =
      act_param && act_param->string_value ? act_param->string_value : "silu";
  const bool sigmoid = act_name == "sigmoid";
  if (!sigmoid && act_name != "silu" && act_name != "swish") return 2;
  auto act = [&](float v) {
    const float e = std::exp(-v);
    return sigmoid ? 1.0f / (1.0f + e) : v / (1.0f + e);
  };
  const auto* xs = static_cast<const uint16_t*>(x->data);
  const auto* ws = static_cast<const uint16_t*>(weight->data);
  const auto* zs = static_cast<const uint16_t*>(z->data);
  auto* os = static_cast<uint16_t*>(out->data);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t base = r * hidden;
    auto input = [&](int64_t h) {
      const float v = bf16_to_float(xs[base + h]);
      return norm_before_gate ? v : v * act(bf16_to_float(zs[base + h]));
    };
    double sum_sq = 0;
    for (int64_t h = 0; h < hidden; ++h) sum_sq += static_cast<double>(input(h)) * input(h);
    const float rstd =
        1.0f / std::sqrt(static_cast<float>(sum_sq / static_cast<double>(hidden)) + eps);
    for (int64_t h = 0; h < hidden; ++h) {
      float o = (input(h) * rstd) * bf16_to_float(ws[h]);
      if (norm_before_gate) o *= act(bf16_to_float(zs[base + h]));
      os[base + h] = float_to_bf16(o);
    }
  }
  return 0;
}
