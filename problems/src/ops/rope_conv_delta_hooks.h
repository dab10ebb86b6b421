// Structured input generators, resolve hooks and analytic rooflines of the rope_conv_delta
// group (included by rope_conv_delta_defs.cpp only). Generators draw what input.py draws
// (alibaba/atrex-bench data/<op>/input.py, read 2026-12-01), deterministic in (seed, input).
#pragma once

#include <cmath>
#include <string>

#include <fmt/format.h>

#include "atrex/problems/operator.h"
#include "def_helpers.h"
#include "generate.h"
#include "rope_conv_delta_chunk.h"

namespace atrex::problems::ops::rcd {

// ---- generators -------------------------------------------------------------------------

// randn in the tensor's resolved dtype: fused_qkv_rope's qkv is bf16 or fp16 by the `dtype`
// kwarg, and the generic generator only knows the TensorSpec's dtype.
inline void randn_resolved_dtype(const ResolvedShape& s, size_t index, uint64_t seed, void* data) {
  GenerateFn f{
      Distribution::kNormal, 1.0f, 0.0f, 0, 1, gen_dtype(s.inputs[index].dtype), data, seed,
      input_stream_id(index)};
  parallel_for_cpu(s.inputs[index].numel(), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) f(i);
  });
}

// positions = arange(total_tokens) (int32).
inline void arange_i32(const ResolvedShape& s, size_t index, uint64_t, void* data) {
  auto* p = static_cast<int32_t*>(data);
  for (int64_t i = 0; i < s.inputs[index].numel(); ++i) p[i] = static_cast<int32_t>(i);
}

// initial_state_indices = arange(batch_size) % state_count (int32).
inline void state_indices(const ResolvedShape& s, size_t index, uint64_t, void* data) {
  auto* p = static_cast<int32_t*>(data);
  const int64_t slots = s.int_param("state_count");
  for (int64_t i = 0; i < s.inputs[index].numel(); ++i) p[i] = static_cast<int32_t>(i % slots);
}

// mrope: cos = cos(angles), sin = sin(angles) of ONE draw angles = fp32(randn) * 0.1 (fp32),
// [3, T, rotary_dim / 2]; both tensors draw from the stream of `cos` so they agree.
template <bool kSin>
void mrope_trig(const ResolvedShape& s, size_t, uint64_t seed, void* data) {
  constexpr size_t kCosIndex = 2;
  auto* p = static_cast<float*>(data);
  parallel_for_cpu(s.inputs[kCosIndex].numel(), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const float n = static_cast<float>(
          num::standard_normal(seed, input_stream_id(kCosIndex), static_cast<uint64_t>(i)));
      const float angle = n * 0.1f;
      p[i] = kSin ? std::sin(angle) : std::cos(angle);
    }
  });
}

// ---- resolve hooks ------------------------------------------------------------------------

inline Result<void> check(bool ok, const std::string& what) {
  if (ok) return atrex::ok();
  return invalid_input(what);
}

inline Result<void> resolve_fused_qkv_rope(ResolvedShape& s) {
  const std::string dt = s.params.at("dtype").get<std::string>();
  if (dt != "bf16" && dt != "fp16")
    return invalid_input(
        fmt::format("parameter \"dtype\": expected \"bf16\" or \"fp16\"; got \"{}\"", dt));
  if (s.params.at("with_bias").get<bool>()) {
    return invalid_input(
        "parameter \"with_bias\": true is not supported (no released shape adds qkv_bias; the "
        "signature has no qkv_bias input)");
  }
  const int64_t d = s.int_param("head_dim"), rope = s.int_param("rope_dim");
  if (auto c = check(rope > 0 && rope % 2 == 0 && rope <= d,
                     fmt::format("rope_dim {} must be even and in (0, head_dim {}]", rope, d));
      !c)
    return c;
  const DType dtype = dt == "fp16" ? DType::kF16 : DType::kBF16;
  s.inputs[0].dtype = dtype;
  s.inputs[0].dims[1] = (s.int_param("num_heads") + 2 * s.int_param("num_kv_heads")) * d;
  for (auto& o : s.outputs) o.dtype = dtype;
  return atrex::ok();
}

inline Result<void> resolve_mrope(ResolvedShape& s) {
  const auto& section = s.params.at("mrope_section");
  if (auto c = check(section.size() == 3,
                     fmt::format("mrope_section must have 3 entries; got {}", section.dump()));
      !c)
    return c;
  const int64_t hs = s.int_param("head_size"), rot = s.int_param("rotary_dim");
  if (auto c = check(rot > 0 && rot % 2 == 0 && rot <= hs,
                     fmt::format("rotary_dim {} must be even and in (0, head_size {}]", rot, hs));
      !c)
    return c;
  s.inputs[0].dims[1] = s.outputs[0].dims[1] = s.int_param("num_query_heads") * hs;
  s.inputs[1].dims[1] = s.outputs[1].dims[1] = s.int_param("num_kv_heads") * hs;
  s.inputs[2].dims[0] = s.inputs[3].dims[0] = 3;
  return atrex::ok();
}

inline Result<void> resolve_causal_conv1d(ResolvedShape& s) {
  const std::string act = s.params.at("activation").get<std::string>();
  if (act != "silu" && act != "swish" && act != "none") {
    return invalid_input(fmt::format(
        "parameter \"activation\": expected \"silu\", \"swish\" or \"none\"; got \"{}\"", act));
  }
  const int64_t width = s.int_param("width");
  if (auto c = check(
          width >= 2,
          fmt::format("width {} must be at least 2 (the state holds width - 1 columns)", width));
      !c)
    return c;
  s.inputs[3].dims[0] = 1;
  s.inputs[3].dims[2] = width - 1;
  return atrex::ok();
}

inline int64_t num_chunks(const ResolvedShape& s) {
  const int64_t cs = s.int_param("chunk_size");
  return (s.int_param("token_count") + cs - 1) / cs;
}

inline Result<void> check_delta_dims(const ResolvedShape& s, bool uses_chunks) {
  const int64_t cs = s.int_param("chunk_size");
  if (uses_chunks) {
    if (auto c = check(cs >= 1 && cs <= kMaxChunkSize,
                       fmt::format("chunk_size {} must be in [1, {}]", cs, kMaxChunkSize));
        !c)
      return c;
  }
  const int64_t dk = s.int_param("key_dim");
  return check(dk <= kMaxKeyDim,
               fmt::format("key_dim {} exceeds the reference's bound {}", dk, kMaxKeyDim));
}

// The in-place state outputs are written slot by slot: distinct batch entries must name
// distinct slots (input.py's arange(batch) % state_count does when batch <= state_count).
inline Result<void> check_state_slots(const ResolvedShape& s) {
  const int64_t b = s.int_param("batch_size"), slots = s.int_param("state_count");
  return check(b >= 1 && b <= slots,
               fmt::format("batch_size {} must be in [1, state_count {}]", b, slots));
}

inline Result<void> resolve_chunk_delta_rule_output(ResolvedShape& s) {
  if (auto c = check_delta_dims(s, true); !c) return c;
  s.inputs[3].dims[1] = num_chunks(s);
  return atrex::ok();
}

inline Result<void> resolve_chunk_gated_delta_rule_state(ResolvedShape& s) {
  if (auto c = check_delta_dims(s, true); !c) return c;
  if (auto c = check_state_slots(s); !c) return c;
  s.outputs[0].dims[1] = num_chunks(s);
  return atrex::ok();
}

inline Result<void> resolve_gated_delta_rule_update(ResolvedShape& s) {
  if (auto c = check_delta_dims(s, false); !c) return c;
  return check_state_slots(s);
}

// ---- analytic rooflines -----------------------------------------------------------------

inline double dbl(int64_t v) { return static_cast<double>(v); }

// 3 FLOPs per rotated lane (two products, one sum) plus, per token and frequency, the angle
// product and its cos and sin. Keyed by the shape's dtype (released: always "fp16").
inline RooflineCounts fused_qkv_rope_roofline(const ResolvedShape& s) {
  const double t = dbl(s.int_param("total_tokens")), rot = dbl(s.int_param("rope_dim"));
  const double heads = dbl(s.int_param("num_heads") + s.int_param("num_kv_heads"));
  const std::string key(dtype_name(s.inputs[0].dtype));
  return RooflineCounts{
      {{key, 3 * t * heads * rot + 3 * t * rot / 2}}, input_bytes(s), output_bytes(s)};
}

// 3 FLOPs per rotated lane; cos/sin counted whole as inputs (only a third is addressed).
inline RooflineCounts mrope_roofline(const ResolvedShape& s) {
  const double lanes = dbl(s.int_param("token_count") *
                           (s.int_param("num_query_heads") + s.int_param("num_kv_heads")) *
                           s.int_param("rotary_dim"));
  return RooflineCounts{{{"bf16", 3 * lanes}}, input_bytes(s), output_bytes(s)};
}

// width multiplies and adds (the bias add included) per output, plus 4 for silu (negate,
// exp, add, divide).
inline RooflineCounts causal_conv1d_roofline(const ResolvedShape& s) {
  const bool act = s.params.at("activation").get<std::string>() != "none";
  const double per = 2 * dbl(s.int_param("width")) + (act ? 4 : 0);
  return RooflineCounts{{{"bf16", per * dbl(s.int_param("dim") * s.int_param("token_count"))}},
                        input_bytes(s),
                        output_bytes(s)};
}

// Dense chunk matmuls over the zero-padded last chunk (q h, q k^T, attn v) plus 8 elementwise
// operations per attention entry (difference, mask, exp, scale, tril, cast, ...).
inline RooflineCounts chunk_delta_rule_output_roofline(const ResolvedShape& s) {
  const double cs = dbl(s.int_param("chunk_size")), dk = dbl(s.int_param("key_dim")),
               dv = dbl(s.int_param("value_dim"));
  const double blocks = dbl(s.int_param("batch_size") * s.int_param("num_v_heads") * num_chunks(s));
  const double per = 2 * cs * dk * dv + 2 * cs * cs * dk + 2 * cs * cs * dv + 8 * cs * cs;
  return RooflineCounts{{{"bf16", blocks * per}}, input_bytes(s), output_bytes(s)};
}

// Per token and head: w h and k^T v (4 dk dv), v_new and its scaling (2 dv), the gate
// difference (1); per chunk and head: decay and add of the state (2 dk dv). State traffic:
// only the batch's slots are read and written (the state is updated in place).
inline RooflineCounts chunk_gated_delta_rule_state_roofline(const ResolvedShape& s) {
  const double dk = dbl(s.int_param("key_dim")), dv = dbl(s.int_param("value_dim"));
  const double bh = dbl(s.int_param("batch_size") * s.int_param("num_v_heads"));
  const double w = bh * (dbl(s.int_param("token_count")) * (4 * dk * dv + 2 * dv + 1) +
                         dbl(num_chunks(s)) * 2 * dk * dv);
  const double slots = bh * dk * dv * 4;
  const double read = input_bytes(s) - static_cast<double>(s.inputs[4].bytes()) + slots;
  const double write = output_bytes(s) - static_cast<double>(s.outputs[2].bytes()) + slots;
  return RooflineCounts{{{"bf16", w}}, read, write};
}

// Per token and head: 7 dk dv on the state (decay, h k, its sum, k v', add, h q, its sum),
// 2 dv for v', dk for q * scale, 2 for the gates, and 6 dk for the two L2 norms. State
// traffic: only the batch's slots.
inline RooflineCounts gated_delta_rule_update_roofline(const ResolvedShape& s) {
  const double dk = dbl(s.int_param("key_dim")), dv = dbl(s.int_param("value_dim"));
  const bool l2 = s.params.at("use_qk_l2norm").get<bool>();
  const double per = 7 * dk * dv + 2 * dv + dk + 2 + (l2 ? 6 * dk : 0);
  const double bh = dbl(s.int_param("batch_size") * s.int_param("num_v_heads"));
  const double slots = bh * dk * dv * 4;
  const double read = input_bytes(s) - static_cast<double>(s.inputs[7].bytes()) + slots;
  const double write = output_bytes(s) - static_cast<double>(s.outputs[1].bytes()) + slots;
  return RooflineCounts{{{"bf16", bh * dbl(s.int_param("token_count")) * per}}, read, write};
}

}  // namespace atrex::problems::ops::rcd
