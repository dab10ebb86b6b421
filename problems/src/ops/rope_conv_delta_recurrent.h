// gated_delta_rule_update reference: the token-by-token gated delta rule of Qwen3-Next
// (SGLang fused_sigmoid_gating_delta_rule_update). Semantics of alibaba/atrex-bench
// data/gated_delta_rule_update/reference.py (read 2026-12-01): fp32 state and arithmetic,
// bf16 output rounded once per token.
#pragma once

#include <cmath>
#include <cstdint>

#include "atrex/problems/numeric.h"
#include "atrex/problems/operator.h"
#include "rope_conv_delta_chunk.h"

namespace atrex::problems::ops {

// One state column (b, head, j) per call. The state h starts as initial_state[indices[b], head];
// for each token t, with q, k the (optionally L2-normalised, eps 1e-6) rows of q/k head
// shared_head(head):
//   gate = softplus(float(a) + float(dt_bias); beta, threshold) * -exp(A_log);  beta = sigmoid(b)
//   h    = h * exp(gate);  v' = (v[t, j] - sum_k h[k] k[k]) * beta;  h[k] += k[k] * v'
//   out[b, t, head, j] = bf16(sum_k h[k] (q[k] * scale))
// and final_state[indices[b], head, :, j] = h after the last token.
struct GatedDeltaRuleColumn {
  const float* a_log;       // [H]
  const uint16_t* a;        // [B, T, H]
  const uint16_t* dt_bias;  // [H]
  const uint16_t* q;        // [B, T, Hq, dk]
  const uint16_t* k;        // [B, T, Hq, dk]
  const uint16_t* v;        // [B, T, H, dv]
  const uint16_t* b_gate;   // [B, T, H]
  const float* initial;     // [S, H, dk, dv]
  const int32_t* indices;   // [B]
  uint16_t* out;            // [B, T, H, dv]
  float* final_state;       // [S, H, dk, dv]
  int64_t tokens, num_q_heads, num_heads, key_dim, value_dim, state_count;
  float scale, softplus_beta, softplus_threshold;
  bool l2norm;

  // The divisor of F.normalize, max(||x||, eps) (norm in fp32, summed here in fp64); 1
  // without normalisation (x / 1 is exact).
  ATREX_HD float norm_divisor(const uint16_t* x) const {
    if (!l2norm) return 1.0f;
    double ss = 0;
    for (int64_t d = 0; d < key_dim; ++d) {
      const double e = num::bf16_to_float(x[d]);
      ss += e * e;
    }
    const float n = sqrtf(static_cast<float>(ss));
    return n > 1e-6f ? n : 1e-6f;
  }

  ATREX_HD void operator()(int64_t i) const {
    const int64_t j = i % value_dim;
    const int64_t head = (i / value_dim) % num_heads;
    const int64_t b = i / (value_dim * num_heads);
    const int64_t slot = indices[b];
    if (slot < 0 || slot >= state_count) return;  // outputs stay poisoned: the shape fails
    const int64_t qh = shared_head(head, num_heads, num_q_heads);
    const int64_t state_base = (slot * num_heads + head) * key_dim * value_dim + j;
    float h[kMaxKeyDim], kt[kMaxKeyDim];  // the state column; this token's (normalised) key
    for (int64_t d = 0; d < key_dim; ++d) h[d] = initial[state_base + d * value_dim];
    const float decay_rate = -expf(a_log[head]);
    const float bias = num::bf16_to_float(dt_bias[head]);
    for (int64_t t = 0; t < tokens; ++t) {
      const int64_t row = (b * tokens + t) * num_heads + head;
      const uint16_t* qrow = q + ((b * tokens + t) * num_q_heads + qh) * key_dim;
      const uint16_t* krow = k + ((b * tokens + t) * num_q_heads + qh) * key_dim;
      const float qn = norm_divisor(qrow), kn = norm_divisor(krow);
      const float x = num::bf16_to_float(a[row]) + bias;
      const float sp = x * softplus_beta > softplus_threshold
                           ? x
                           : log1pf(expf(x * softplus_beta)) / softplus_beta;
      const float decay = expf(sp * decay_rate);
      const float beta = 1.0f / (1.0f + expf(-num::bf16_to_float(b_gate[row])));
      double hk = 0;
      for (int64_t d = 0; d < key_dim; ++d) {
        kt[d] = num::bf16_to_float(krow[d]) / kn;
        h[d] = h[d] * decay;
        hk += static_cast<double>(h[d]) * kt[d];
      }
      const float vn = (num::bf16_to_float(v[row * value_dim + j]) - static_cast<float>(hk)) * beta;
      double o = 0;
      for (int64_t d = 0; d < key_dim; ++d) {
        const float qd = num::bf16_to_float(qrow[d]) / qn;
        h[d] = h[d] + kt[d] * vn;
        o += static_cast<double>(h[d]) * (qd * scale);
      }
      out[row * value_dim + j] = num::float_to_bf16(static_cast<float>(o));
    }
    for (int64_t d = 0; d < key_dim; ++d) final_state[state_base + d * value_dim] = h[d];
  }
};

template <class Exec>
void gated_delta_rule_update_reference(const Exec& ex, const ResolvedShape& s,
                                       const void* const* in, void* const* out) {
  GatedDeltaRuleColumn f{static_cast<const float*>(in[0]),
                         static_cast<const uint16_t*>(in[1]),
                         static_cast<const uint16_t*>(in[2]),
                         static_cast<const uint16_t*>(in[3]),
                         static_cast<const uint16_t*>(in[4]),
                         static_cast<const uint16_t*>(in[5]),
                         static_cast<const uint16_t*>(in[6]),
                         static_cast<const float*>(in[7]),
                         static_cast<const int32_t*>(in[8]),
                         static_cast<uint16_t*>(out[0]),
                         static_cast<float*>(out[1]),
                         s.int_param("token_count"),
                         s.int_param("num_q_heads"),
                         s.int_param("num_v_heads"),
                         s.int_param("key_dim"),
                         s.int_param("value_dim"),
                         s.int_param("state_count"),
                         delta_rule_scale(s),
                         static_cast<float>(s.float_param("softplus_beta")),
                         static_cast<float>(s.float_param("softplus_threshold")),
                         s.params.at("use_qk_l2norm").get<bool>()};
  ex.for_each(s.int_param("batch_size") * f.num_heads * f.value_dim, f);
}

}  // namespace atrex::problems::ops
