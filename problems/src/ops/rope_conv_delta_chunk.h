// Chunked (gated) delta-rule references of FLA's chunk kernels (Qwen3-Next linear attention):
// chunk_delta_rule_output (chunk_fwd_o) and chunk_gated_delta_rule_state
// (chunk_gated_delta_rule_fwd_h). Semantics of alibaba/atrex-bench data/<op>/reference.py
// (read 2026-12-01): bf16 operands, fp32 matmuls (we sum in fp64), and the bf16 casts the
// reference makes in the middle (attention weights, the state fed to w @ h, the scaled
// v_new) are modelled exactly.
#pragma once

#include <cmath>
#include <cstdint>

#include "atrex/problems/numeric.h"
#include "atrex/problems/operator.h"

namespace atrex::problems::ops {

// Per-thread scratch bounds of the functors below (local arrays: no allocation in device
// code). OperatorDef::resolve rejects shapes beyond them.
inline constexpr int64_t kMaxChunkSize = 256;
inline constexpr int64_t kMaxKeyDim = 256;

// Output head h of a chunk head group: heads are repeated over q/k heads as the reference's
// head_to_qhead does (min(h / max(H / Hq, 1), Hq - 1)).
ATREX_HD int64_t shared_head(int64_t head, int64_t num_heads, int64_t num_shared_heads) {
  const int64_t per = num_heads / num_shared_heads > 1 ? num_heads / num_shared_heads : 1;
  const int64_t s = head / per;
  return s < num_shared_heads - 1 ? s : num_shared_heads - 1;
}

// One output row o[b, t, head, :] per call. With c the chunk of t and s in [chunk start, t]:
//   inter[j] = float(sum_k q[t,k] h[b,c,head,k,j]) * exp(g[t])
//   a[s]     = bf16(float(sum_k q[t,k] k[s,k]) * (g[t] - g[s] <= 0 ? exp(g[t] - g[s]) : 0))
//   o[j]     = bf16((inter[j] + float(sum_s a[s] v[s,j])) * scale)
// q, k: [B, T, Hq, dk]; v: [B, T, H, dv]; h: [B, NC, H, dk, dv] bf16; g: [B, T, H] fp32.
// Padding the last chunk (reference.py pads with zeros) changes no row t < T.
struct ChunkDeltaRuleOutputRow {
  const uint16_t* q;
  const uint16_t* k;
  const uint16_t* v;
  const uint16_t* h;
  const float* g;
  uint16_t* out;
  int64_t tokens, num_q_heads, num_heads, key_dim, value_dim, chunk_size, num_chunks;
  float scale;
  ATREX_HD void operator()(int64_t i) const {
    const int64_t head = i % num_heads;
    const int64_t t = (i / num_heads) % tokens;
    const int64_t b = i / (num_heads * tokens);
    const int64_t qh = shared_head(head, num_heads, num_q_heads);
    const int64_t c = t / chunk_size, start = c * chunk_size;
    const uint16_t* qrow = q + ((b * tokens + t) * num_q_heads + qh) * key_dim;
    const float gt = g[(b * tokens + t) * num_heads + head];
    float attn[kMaxChunkSize];
    for (int64_t s = start; s <= t; ++s) {
      const uint16_t* krow = k + ((b * tokens + s) * num_q_heads + qh) * key_dim;
      double dot = 0;
      for (int64_t d = 0; d < key_dim; ++d) {
        dot += static_cast<double>(num::bf16_to_float(qrow[d])) * num::bf16_to_float(krow[d]);
      }
      const float gd = gt - g[(b * tokens + s) * num_heads + head];
      attn[s - start] = gd <= 0.0f ? num::round_bf16(static_cast<float>(dot) * expf(gd)) : 0.0f;
    }
    const float eg = expf(gt);
    const uint16_t* hc = h + ((b * num_chunks + c) * num_heads + head) * key_dim * value_dim;
    uint16_t* orow = out + ((b * tokens + t) * num_heads + head) * value_dim;
    for (int64_t j = 0; j < value_dim; ++j) {
      double inter = 0;
      for (int64_t d = 0; d < key_dim; ++d) {
        inter += static_cast<double>(num::bf16_to_float(qrow[d])) *
                 num::bf16_to_float(hc[d * value_dim + j]);
      }
      double intra = 0;
      for (int64_t s = start; s <= t; ++s) {
        intra += static_cast<double>(attn[s - start]) *
                 num::bf16_to_float(v[((b * tokens + s) * num_heads + head) * value_dim + j]);
      }
      const float o = static_cast<float>(inter) * eg;
      orow[j] = num::float_to_bf16((o + static_cast<float>(intra)) * scale);
    }
  }
};

// One state column (b, head, j) per call: columns of the [dk, dv] state evolve independently.
// The state h (fp32) starts as initial_state[indices[b], head]; for each chunk [start, end):
//   h_out[b, c, head, :, j] = bf16(h)
//   v[t]       = u[t, j] - float(sum_k w[t, k] bf16(h[k]))       (v_new[t, j] = bf16(v[t]))
//   vs[t]      = bf16(v[t] * (g_last - g[t] <= 0 ? exp(g_last - g[t]) : 0)),  g_last = g[end - 1]
//   h[k]       = h[k] * exp(g_last) + float(sum_t k[t, k] vs[t])
// and final_state[indices[b], head, :, j] = h at the end (the output starts as initial_state,
// so slots no batch entry names keep their values).
struct ChunkGatedDeltaStateColumn {
  const uint16_t* k;       // [B, T, Hk, dk]
  const uint16_t* w;       // [B, T, H, dk]
  const uint16_t* u;       // [B, T, H, dv]
  const float* g;          // [B, T, H]
  const float* initial;    // [S, H, dk, dv]
  const int32_t* indices;  // [B]
  uint16_t* h_out;         // [B, NC, H, dk, dv]
  uint16_t* v_new;         // [B, T, H, dv]
  float* final_state;      // [S, H, dk, dv]
  int64_t tokens, num_k_heads, num_heads, key_dim, value_dim, chunk_size, num_chunks, state_count;
  ATREX_HD void operator()(int64_t i) const {
    const int64_t j = i % value_dim;
    const int64_t head = (i / value_dim) % num_heads;
    const int64_t b = i / (value_dim * num_heads);
    const int64_t slot = indices[b];
    if (slot < 0 || slot >= state_count) return;  // outputs stay poisoned: the shape fails
    const int64_t kh = shared_head(head, num_heads, num_k_heads);
    const int64_t state_base = (slot * num_heads + head) * key_dim * value_dim + j;
    float hcol[kMaxKeyDim], hb[kMaxKeyDim];  // the state and its bf16 image of this chunk
    double acc[kMaxKeyDim];
    for (int64_t d = 0; d < key_dim; ++d) hcol[d] = initial[state_base + d * value_dim];
    for (int64_t c = 0; c < num_chunks; ++c) {
      const int64_t start = c * chunk_size;
      const int64_t end = start + chunk_size < tokens ? start + chunk_size : tokens;
      uint16_t* hc = h_out + ((b * num_chunks + c) * num_heads + head) * key_dim * value_dim + j;
      for (int64_t d = 0; d < key_dim; ++d) {
        hc[d * value_dim] = num::float_to_bf16(hcol[d]);
        hb[d] = num::round_bf16(hcol[d]);
        acc[d] = 0;
      }
      const float g_last = g[(b * tokens + end - 1) * num_heads + head];
      for (int64_t t = start; t < end; ++t) {
        const int64_t row = (b * tokens + t) * num_heads + head;
        const uint16_t* wrow = w + row * key_dim;
        double dot = 0;
        for (int64_t d = 0; d < key_dim; ++d) {
          dot += static_cast<double>(num::bf16_to_float(wrow[d])) * hb[d];
        }
        const float vt = num::bf16_to_float(u[row * value_dim + j]) - static_cast<float>(dot);
        v_new[row * value_dim + j] = num::float_to_bf16(vt);
        const float gd = g_last - g[row];
        const float vs = num::round_bf16(vt * (gd <= 0.0f ? expf(gd) : 0.0f));
        const uint16_t* krow = k + ((b * tokens + t) * num_k_heads + kh) * key_dim;
        for (int64_t d = 0; d < key_dim; ++d)
          acc[d] += static_cast<double>(num::bf16_to_float(krow[d])) * vs;
      }
      const float decay = expf(g_last);
      for (int64_t d = 0; d < key_dim; ++d) hcol[d] = hcol[d] * decay + static_cast<float>(acc[d]);
    }
    for (int64_t d = 0; d < key_dim; ++d) final_state[state_base + d * value_dim] = hcol[d];
  }
};

// scale: the `scale` kwarg, or key_dim^-0.5 when it is None (absent / null).
inline float delta_rule_scale(const ResolvedShape& s) {
  auto it = s.params.find("scale");
  if (it != s.params.end() && it->is_number()) return static_cast<float>(it->get<double>());
  return static_cast<float>(std::pow(static_cast<double>(s.int_param("key_dim")), -0.5));
}

template <class Exec>
void chunk_delta_rule_output_reference(const Exec& ex, const ResolvedShape& s,
                                       const void* const* in, void* const* out) {
  ChunkDeltaRuleOutputRow f{static_cast<const uint16_t*>(in[0]),
                            static_cast<const uint16_t*>(in[1]),
                            static_cast<const uint16_t*>(in[2]),
                            static_cast<const uint16_t*>(in[3]),
                            static_cast<const float*>(in[4]),
                            static_cast<uint16_t*>(out[0]),
                            s.int_param("token_count"),
                            s.int_param("num_q_heads"),
                            s.int_param("num_v_heads"),
                            s.int_param("key_dim"),
                            s.int_param("value_dim"),
                            s.int_param("chunk_size"),
                            s.inputs[3].dims[1],
                            delta_rule_scale(s)};
  ex.for_each(s.int_param("batch_size") * f.tokens * f.num_heads, f);
}

template <class Exec>
void chunk_gated_delta_rule_state_reference(const Exec& ex, const ResolvedShape& s,
                                            const void* const* in, void* const* out) {
  ChunkGatedDeltaStateColumn f{static_cast<const uint16_t*>(in[0]),
                               static_cast<const uint16_t*>(in[1]),
                               static_cast<const uint16_t*>(in[2]),
                               static_cast<const float*>(in[3]),
                               static_cast<const float*>(in[4]),
                               static_cast<const int32_t*>(in[5]),
                               static_cast<uint16_t*>(out[0]),
                               static_cast<uint16_t*>(out[1]),
                               static_cast<float*>(out[2]),
                               s.int_param("token_count"),
                               s.int_param("num_k_heads"),
                               s.int_param("num_v_heads"),
                               s.int_param("key_dim"),
                               s.int_param("value_dim"),
                               s.int_param("chunk_size"),
                               s.outputs[0].dims[1],
                               s.int_param("state_count")};
  ex.for_each(s.int_param("batch_size") * f.num_heads * f.value_dim, f);
}

}  // namespace atrex::problems::ops
