// fused_qkv_rope, mrope and causal_conv1d references: semantics of alibaba/atrex-bench
// data/<op>/reference.py (read 2026-12-01). Arithmetic is fp32 as torch's `.float()` does it;
// every torch op that produces a bf16/fp16 tensor rounds there, and so do we. The delta-rule
// references are in rope_conv_delta_chunk.h and rope_conv_delta_recurrent.h.
#pragma once

#include <cstdint>
#include <string>

#include "atrex/problems/numeric.h"
#include "atrex/problems/operator.h"

namespace atrex::problems::ops {

// A 16-bit float tensor whose type (bf16 or fp16) is a shape parameter (fused_qkv_rope's
// `dtype` kwarg).
ATREX_HD float half_to_float(uint16_t v, bool fp16) {
  return fp16 ? num::fp16_to_float(v) : num::bf16_to_float(v);
}
ATREX_HD uint16_t float_to_half(float f, bool fp16) {
  return fp16 ? num::float_to_fp16(f) : num::float_to_bf16(f);
}

// qkv: [T, (Hq + 2 Hkv) * D] -> q: [T, Hq, D], k, v: [T, Hkv, D]; one (token, head) per call.
// The first rope_dim lanes of q and k heads are rotated NeoX style (rotate_half) with
// inv_freq[i] = 1 / base^(2i / rope_dim) and angle = float(position) * inv_freq, all fp32;
// the rest of the head and v pass through. Without a bias, x is the input itself.
struct FusedQkvRopeHead {
  const uint16_t* qkv;
  const int32_t* positions;
  uint16_t* q;
  uint16_t* k;
  uint16_t* v;
  int64_t num_heads, num_kv_heads, head_dim, rope_dim;
  float base;
  bool fp16;
  ATREX_HD void operator()(int64_t i) const {
    const int64_t heads = num_heads + 2 * num_kv_heads;
    const int64_t t = i / heads, head = i % heads;
    const uint16_t* x = qkv + (t * heads + head) * head_dim;
    uint16_t* dst;
    if (head < num_heads)
      dst = q + (t * num_heads + head) * head_dim;
    else if (head < num_heads + num_kv_heads)
      dst = k + (t * num_kv_heads + head - num_heads) * head_dim;
    else
      dst = v + (t * num_kv_heads + head - num_heads - num_kv_heads) * head_dim;
    const bool rotate = head < num_heads + num_kv_heads;
    const int64_t half = rope_dim / 2;
    const float pos = static_cast<float>(positions[t]);
    for (int64_t d = 0; d < head_dim; ++d) {
      if (!rotate || d >= rope_dim) {
        dst[d] = x[d];
        continue;
      }
      const int64_t f = d % half;
      const float inv_freq =
          1.0f / powf(base, static_cast<float>(2 * f) / static_cast<float>(rope_dim));
      const float angle = pos * inv_freq;
      const float xd = half_to_float(x[d], fp16);
      const float partner =
          d < half ? -half_to_float(x[d + half], fp16) : half_to_float(x[d - half], fp16);
      const float a = xd * cosf(angle);
      const float b = partner * sinf(angle);
      dst[d] = float_to_half(a + b, fp16);
    }
  }
};

// M-RoPE (Qwen2/3-VL): x: [T, H * head_size] bf16, cos/sin: [3, T, rotary_dim / 2] fp32.
// Frequency f takes its cos/sin from axis a(f) (0 temporal, 1 height, 2 width) at position t:
// sectioned layout: a = 0 below s0, 1 below s0 + s1, else 2; interleaved layout: a = 1 where
// f % 3 == 1 and f <= 3 s1, a = 2 where f % 3 == 2 and f <= 3 s2, else 0 (as reference.py
// writes it). NeoX pairs (f, f + half), GPT-J pairs (2f, 2f + 1); lanes past rotary_dim pass.
struct MropeHead {
  const uint16_t* q_in;
  const uint16_t* k_in;
  const float* cos;
  const float* sin;
  uint16_t* q_out;
  uint16_t* k_out;
  int64_t tokens, num_q_heads, num_kv_heads, head_size, rotary_dim;
  int64_t s0, s1, s2;
  bool interleaved, neox;
  ATREX_HD int64_t axis(int64_t f) const {
    if (interleaved) {
      if (f % 3 == 1 && f <= 3 * s1) return 1;
      if (f % 3 == 2 && f <= 3 * s2) return 2;
      return 0;
    }
    return f < s0 ? 0 : (f < s0 + s1 ? 1 : 2);
  }
  ATREX_HD void operator()(int64_t i) const {
    const int64_t heads = num_q_heads + num_kv_heads;
    const int64_t t = i / heads, head = i % heads;
    const bool is_q = head < num_q_heads;
    const int64_t row = is_q ? (t * num_q_heads + head) : (t * num_kv_heads + head - num_q_heads);
    const uint16_t* x = (is_q ? q_in : k_in) + row * head_size;
    uint16_t* y = (is_q ? q_out : k_out) + row * head_size;
    const int64_t half = rotary_dim / 2;
    for (int64_t d = rotary_dim; d < head_size; ++d) y[d] = x[d];
    for (int64_t f = 0; f < half; ++f) {
      const int64_t at = (axis(f) * tokens + t) * half + f;
      const float c = cos[at], s = sin[at];
      const int64_t i1 = neox ? f : 2 * f;
      const int64_t i2 = neox ? f + half : 2 * f + 1;
      const float x1 = num::bf16_to_float(x[i1]), x2 = num::bf16_to_float(x[i2]);
      y[i1] = num::float_to_bf16(x1 * c - x2 * s);
      y[i2] = num::float_to_bf16(x2 * c + x1 * s);
    }
  }
};

// Depthwise causal conv over [initial_state | x] per channel: x: [D, T], weight: [D, W],
// bias: [D], initial_state: [1, D, W - 1], all bf16; one output element per call:
// conv = bf16(bias + sum_j w[j] * padded[t + j]) (torch's bf16 conv1d accumulates in fp32),
// out = bf16(silu(conv)) with silu in fp32, or out = conv without activation.
struct CausalConv1dElement {
  const uint16_t* x;
  const uint16_t* weight;
  const uint16_t* bias;
  const uint16_t* state;
  uint16_t* out;
  int64_t dim, tokens, width;
  bool silu;
  ATREX_HD void operator()(int64_t i) const {
    const int64_t d = i / tokens, t = i % tokens;
    double acc = num::bf16_to_float(bias[d]);
    for (int64_t j = 0; j < width; ++j) {
      const int64_t p = t + j;  // index into [state (W - 1 entries) | x]
      const uint16_t in =
          p < width - 1 ? state[d * (width - 1) + p] : x[d * tokens + p - (width - 1)];
      acc +=
          static_cast<double>(num::bf16_to_float(weight[d * width + j])) * num::bf16_to_float(in);
    }
    const float conv = num::round_bf16(static_cast<float>(acc));
    out[i] = num::float_to_bf16(silu ? conv / (1.0f + expf(-conv)) : conv);
  }
};

template <class Exec>
void fused_qkv_rope_reference(const Exec& ex, const ResolvedShape& s, const void* const* in,
                              void* const* out) {
  FusedQkvRopeHead f{static_cast<const uint16_t*>(in[0]),
                     static_cast<const int32_t*>(in[1]),
                     static_cast<uint16_t*>(out[0]),
                     static_cast<uint16_t*>(out[1]),
                     static_cast<uint16_t*>(out[2]),
                     s.int_param("num_heads"),
                     s.int_param("num_kv_heads"),
                     s.int_param("head_dim"),
                     s.int_param("rope_dim"),
                     static_cast<float>(s.float_param("rope_base")),
                     s.inputs[0].dtype == DType::kF16};
  ex.for_each(s.int_param("total_tokens") * (f.num_heads + 2 * f.num_kv_heads), f);
}

template <class Exec>
void mrope_reference(const Exec& ex, const ResolvedShape& s, const void* const* in,
                     void* const* out) {
  const auto& section = s.params.at("mrope_section");
  MropeHead f{static_cast<const uint16_t*>(in[0]),
              static_cast<const uint16_t*>(in[1]),
              static_cast<const float*>(in[2]),
              static_cast<const float*>(in[3]),
              static_cast<uint16_t*>(out[0]),
              static_cast<uint16_t*>(out[1]),
              s.int_param("token_count"),
              s.int_param("num_query_heads"),
              s.int_param("num_kv_heads"),
              s.int_param("head_size"),
              s.int_param("rotary_dim"),
              section[0].get<int64_t>(),
              section[1].get<int64_t>(),
              section[2].get<int64_t>(),
              s.params.at("mrope_interleaved").get<bool>(),
              s.params.at("is_neox_style").get<bool>()};
  ex.for_each(f.tokens * (f.num_q_heads + f.num_kv_heads), f);
}

template <class Exec>
void causal_conv1d_reference(const Exec& ex, const ResolvedShape& s, const void* const* in,
                             void* const* out) {
  const std::string activation = s.params.at("activation").get<std::string>();
  CausalConv1dElement f{static_cast<const uint16_t*>(in[0]),
                        static_cast<const uint16_t*>(in[1]),
                        static_cast<const uint16_t*>(in[2]),
                        static_cast<const uint16_t*>(in[3]),
                        static_cast<uint16_t*>(out[0]),
                        s.int_param("dim"),
                        s.int_param("token_count"),
                        s.int_param("width"),
                        activation == "silu" || activation == "swish"};
  ex.for_each(f.dim * f.tokens, f);
}

}  // namespace atrex::problems::ops
