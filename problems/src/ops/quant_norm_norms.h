// Row normalisations and the gated linear of group "quant_norm": gated_rms_norm, layer_norm,
// fused_qk_rmsnorm, linear_sigmoid_mul. Semantics of alibaba/atrex-bench
// data/<op>/reference.py (read 2026-11-30): arithmetic in fp32 from bf16/fp16 inputs, every
// tensor op that produces a bf16/fp16 tensor rounds there; sums of squares, means and dot
// products accumulate in fp64 (a reference should not be less exact than torch).
#pragma once

#include <cstdint>
#include <string>

#include "atrex/problems/numeric.h"
#include "atrex/problems/operator.h"

namespace atrex::problems::ops {

enum GateActivation : int { kGateSilu = 0, kGateSigmoid = 1 };

// "silu"/"swish" -> kGateSilu, "sigmoid" -> kGateSigmoid, anything else -> -1.
inline int gate_activation(const std::string& name) {
  if (name == "silu" || name == "swish") return kGateSilu;
  if (name == "sigmoid") return kGateSigmoid;
  return -1;
}

// x, z: [R, H] bf16, weight: [H] bf16 -> out: [R, H] bf16 (fp32 arithmetic, one rounding):
//   norm_before_gate: out = bf16((x * rstd(x)) * w * act(z))
//   else:             g = x * act(z); out = bf16((g * rstd(g)) * w)
// with rstd(v) = rsqrt(mean(v^2) + eps), silu(z) = z / (1 + exp(-z)), sigmoid = 1 / (1 + exp(-z)).
struct GatedRmsNormRow {
  const uint16_t* x;
  const uint16_t* weight;
  const uint16_t* z;
  uint16_t* out;
  int64_t hidden;
  float eps;
  bool norm_before_gate;
  int activation;  // GateActivation
  ATREX_HD float act(float v) const {
    const float e = expf(-v);
    return activation == kGateSigmoid ? 1.0f / (1.0f + e) : v / (1.0f + e);
  }
  ATREX_HD float input(int64_t i) const {
    const float v = num::bf16_to_float(x[i]);
    return norm_before_gate ? v : v * act(num::bf16_to_float(z[i]));
  }
  ATREX_HD void operator()(int64_t row) const {
    const int64_t base = row * hidden;
    double ss = 0;
    for (int64_t h = 0; h < hidden; ++h) {
      const double v = input(base + h);
      ss += v * v;
    }
    const float rstd = 1.0f / sqrtf(static_cast<float>(ss / static_cast<double>(hidden)) + eps);
    for (int64_t h = 0; h < hidden; ++h) {
      float o = (input(base + h) * rstd) * num::bf16_to_float(weight[h]);
      if (norm_before_gate) o = o * act(num::bf16_to_float(z[base + h]));
      out[base + h] = num::float_to_bf16(o);
    }
  }
};

// x: [rows, H] bf16 (leading dims flattened), weight, bias: [H] bf16 -> out = bf16(((x - mean) *
// rsqrt(var + eps)) * w + b), biased variance, eps = 1e-5 (F.layer_norm's default), fp32 output
// arithmetic as torch's CUDA layer_norm kernel does.
struct LayerNormRow {
  const uint16_t* x;
  const uint16_t* weight;
  const uint16_t* bias;
  uint16_t* out;
  int64_t hidden;
  float eps;
  ATREX_HD void operator()(int64_t row) const {
    const uint16_t* xr = x + row * hidden;
    double sum = 0;
    for (int64_t h = 0; h < hidden; ++h) sum += num::bf16_to_float(xr[h]);
    const double mean = sum / static_cast<double>(hidden);
    double m2 = 0;
    for (int64_t h = 0; h < hidden; ++h) {
      const double d = num::bf16_to_float(xr[h]) - mean;
      m2 += d * d;
    }
    const float rstd = 1.0f / sqrtf(static_cast<float>(m2 / static_cast<double>(hidden)) + eps);
    const float meanf = static_cast<float>(mean);
    for (int64_t h = 0; h < hidden; ++h) {
      const float v = ((num::bf16_to_float(xr[h]) - meanf) * rstd) * num::bf16_to_float(weight[h]) +
                      num::bf16_to_float(bias[h]);
      out[row * hidden + h] = num::float_to_bf16(v);
    }
  }
};

// hidden_states: [T, (Hq + 2 Hkv) * d] fp16 = [q | k | v], q_weight, k_weight: [d] fp16 -> out,
// same layout: each q head and k head is RMS-normalised over d, v is copied.
//   out = fp16(w * fp16(x * rsqrt(mean(x^2) + eps)))   (fp32 norm, rounded, then an fp16 multiply)
// One unit per (token, head slot), head slots q_0..q_{Hq-1}, k_0.., v_0...
struct FusedQkRmsNormHead {
  const uint16_t* hidden_states;
  const uint16_t* q_weight;
  const uint16_t* k_weight;
  uint16_t* out;
  int64_t head_num;
  int64_t kv_head_num;
  int64_t head_size;
  float eps;
  ATREX_HD void operator()(int64_t unit) const {
    const int64_t slots = head_num + 2 * kv_head_num;
    const int64_t slot = unit % slots;
    const int64_t base = unit * head_size;  // (token * slots + slot) * head_size
    if (slot >= head_num + kv_head_num) {
      for (int64_t j = 0; j < head_size; ++j) out[base + j] = hidden_states[base + j];
      return;
    }
    const uint16_t* w = slot < head_num ? q_weight : k_weight;
    double ss = 0;
    for (int64_t j = 0; j < head_size; ++j) {
      const double v = num::fp16_to_float(hidden_states[base + j]);
      ss += v * v;
    }
    const float r = 1.0f / sqrtf(static_cast<float>(ss / static_cast<double>(head_size)) + eps);
    for (int64_t j = 0; j < head_size; ++j) {
      const float normed = num::round_fp16(num::fp16_to_float(hidden_states[base + j]) * r);
      out[base + j] = num::float_to_fp16(num::fp16_to_float(w[j]) * normed);
    }
  }
};

// hidden_states: [T, H], weight: [N, H], bias: [N], post_mul_mat: [T, N] (bf16) -> out: [T, N]:
//   gate = bf16(x . w_n + b_n)  (F.linear: fp32 accumulation and bias epilogue, one rounding)
//   out = bf16(sigmoid(gate) * post), fp32. One unit per output element.
struct LinearSigmoidMulElem {
  const uint16_t* hidden_states;
  const uint16_t* weight;
  const uint16_t* bias;
  const uint16_t* post_mul_mat;
  uint16_t* out;
  int64_t hidden;
  int64_t out_features;
  ATREX_HD void operator()(int64_t i) const {
    const int64_t t = i / out_features, n = i % out_features;
    const uint16_t* xr = hidden_states + t * hidden;
    const uint16_t* wr = weight + n * hidden;
    // A bf16 x bf16 product is exact in fp32. Eight interleaved fp64 partial sums let the host
    // compiler vectorise (~5x on the CPU backend) with one fixed order on both backends.
    double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t k = 0;
    for (; k + 8 <= hidden; k += 8) {
      for (int j = 0; j < 8; ++j)
        acc[j] += num::bf16_to_float(xr[k + j]) * num::bf16_to_float(wr[k + j]);
    }
    for (; k < hidden; ++k) acc[0] += num::bf16_to_float(xr[k]) * num::bf16_to_float(wr[k]);
    const double dot =
        ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    const float gate = num::round_bf16(static_cast<float>(dot) + num::bf16_to_float(bias[n]));
    const float sig = 1.0f / (1.0f + expf(-gate));
    out[i] = num::float_to_bf16(sig * num::bf16_to_float(post_mul_mat[i]));
  }
};

template <class Exec>
void gated_rms_norm_reference(const Exec& ex, const ResolvedShape& s, const void* const* in,
                              void* const* out) {
  GatedRmsNormRow f{static_cast<const uint16_t*>(in[0]),
                    static_cast<const uint16_t*>(in[1]),
                    static_cast<const uint16_t*>(in[2]),
                    static_cast<uint16_t*>(out[0]),
                    s.int_param("hidden_size"),
                    static_cast<float>(s.float_param("eps")),
                    s.params.value("norm_before_gate", true),
                    gate_activation(s.params.value("activation", std::string("silu")))};
  ex.for_each(s.int_param("rows"), f);
}

template <class Exec>
void layer_norm_reference(const Exec& ex, const ResolvedShape& s, const void* const* in,
                          void* const* out) {
  const int64_t hidden = s.inputs[1].dims[0];
  LayerNormRow f{static_cast<const uint16_t*>(in[0]),
                 static_cast<const uint16_t*>(in[1]),
                 static_cast<const uint16_t*>(in[2]),
                 static_cast<uint16_t*>(out[0]),
                 hidden,
                 1e-5f};
  ex.for_each(s.inputs[0].numel() / hidden, f);
}

template <class Exec>
void fused_qk_rmsnorm_reference(const Exec& ex, const ResolvedShape& s, const void* const* in,
                                void* const* out) {
  const int64_t heads = s.int_param("head_num"), kv_heads = s.int_param("kv_head_num");
  FusedQkRmsNormHead f{static_cast<const uint16_t*>(in[0]),
                       static_cast<const uint16_t*>(in[1]),
                       static_cast<const uint16_t*>(in[2]),
                       static_cast<uint16_t*>(out[0]),
                       heads,
                       kv_heads,
                       s.int_param("size_per_head"),
                       static_cast<float>(s.float_param("eps"))};
  ex.for_each(s.int_param("num_tokens") * (heads + 2 * kv_heads), f);
}

template <class Exec>
void linear_sigmoid_mul_reference(const Exec& ex, const ResolvedShape& s, const void* const* in,
                                  void* const* out) {
  const int64_t tokens = s.int_param("token_count"), n = s.int_param("out_features");
  LinearSigmoidMulElem f{static_cast<const uint16_t*>(in[0]),
                         static_cast<const uint16_t*>(in[1]),
                         static_cast<const uint16_t*>(in[2]),
                         static_cast<const uint16_t*>(in[3]),
                         static_cast<uint16_t*>(out[0]),
                         s.int_param("hidden_size"),
                         n};
  ex.for_each(tokens * n, f);
}

}  // namespace atrex::problems::ops
