// Helpers for writing operator definitions (the *_defs.cpp files): parameter and
// distribution shorthands, and the glue from a shared reference functor template to the
// OperatorDef's CPU entry point.
#pragma once

#include <span>
#include <vector>

#include "atrex/problems/operator.h"
#include "executors.h"

namespace atrex::problems::ops {

// A host/device reference template `Ref<Exec>(exec, shape, in, out)` as a CpuReferenceFn.
template <void (*Ref)(const CpuExec&, const ResolvedShape&, const void* const*, void* const*)>
void cpu_ref(const ResolvedShape& s, std::span<const void* const> in, std::span<void* const> out) {
  Ref(CpuExec{}, s, in.data(), out.data());
}

// randn * scale + offset, rounded to the tensor dtype after each step (torch semantics).
inline Distribution normal(double scale = 1.0, double offset = 0.0) {
  return Distribution{Distribution::kNormal, scale, offset, 0, 1};
}
// U(lo, hi); integer tensors take floor(), so uniform(0, n) draws ints in [0, n).
inline Distribution uniform(double lo, double hi) {
  return Distribution{Distribution::kUniform, 1, 0, lo, hi};
}

inline ParamSpec int_param(const char* name, const char* doc) {
  return ParamSpec{name, ParamKind::kInt, true, nullptr, doc};
}
inline ParamSpec float_param(const char* name, double dflt, const char* doc) {
  return ParamSpec{name, ParamKind::kFloat, false, dflt, doc};
}
inline ParamSpec optional_int_param(const char* name, int64_t dflt, const char* doc) {
  return ParamSpec{name, ParamKind::kInt, false, dflt, doc};
}
inline ParamSpec bool_param(const char* name, bool dflt, const char* doc) {
  return ParamSpec{name, ParamKind::kBool, false, dflt, doc};
}
inline ParamSpec string_param(const char* name, const char* dflt, const char* doc) {
  return ParamSpec{name, ParamKind::kString, false, dflt, doc};
}
inline ParamSpec int_list_param(const char* name, const char* doc) {
  return ParamSpec{name, ParamKind::kIntList, true, nullptr, doc};
}

// Bytes of all inputs / all outputs of a resolved shape (compulsory traffic when every
// tensor is read or written exactly once).
inline double input_bytes(const ResolvedShape& s) {
  double b = 0;
  for (const auto& t : s.inputs) b += static_cast<double>(t.bytes());
  return b;
}
inline double output_bytes(const ResolvedShape& s) {
  double b = 0;
  for (const auto& t : s.outputs) b += static_cast<double>(t.bytes());
  return b;
}

// Each group of operators registers itself here (one *_defs.cpp per group).
void add_norm_operators(std::vector<OperatorDef>& ops);  // rms_norm, fused_add_rms_norm, l2_norm
void add_activation_operators(std::vector<OperatorDef>& ops);  // silu_and_mul, moe_sum_reduce
// fp8_dynamic_per_token_quant, per_token_group_quant_fp8, fused_rmsnorm_quant, gated_rms_norm,
// layer_norm, fused_qk_rmsnorm, linear_sigmoid_mul
void add_quant_norm_operators(std::vector<OperatorDef>& ops);
// moe_align_block_size, moe_count_and_sort, moe_topk_gating_softmax, topk_filter, fused_moe,
// fp8_blockscale_fused_moe, block_scaled_mm
void add_moe_gemm_operators(std::vector<OperatorDef>& ops);
// attention_forward, unified_attention, paged_attention_decode, mla_decode_attention,
// reshape_and_cache
void add_attention_operators(std::vector<OperatorDef>& ops);
// fused_qkv_rope, mrope, causal_conv1d, chunk_delta_rule_output, chunk_gated_delta_rule_state,
// gated_delta_rule_update
void add_rope_conv_delta_operators(std::vector<OperatorDef>& ops);

}  // namespace atrex::problems::ops
