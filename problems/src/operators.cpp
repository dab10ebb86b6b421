// The native operator table: every group of operators registers itself (ops/*_defs.cpp).
#include <map>

#include "atrex/problems/operator.h"
#include "ops/def_helpers.h"
#include "ops/edge_cases.h"
#include "ops/reduced_shapes.h"

namespace atrex::problems {
namespace {

std::vector<OperatorDef> make_operators() {
  std::vector<OperatorDef> ops;
  ops::add_norm_operators(ops);
  ops::add_activation_operators(ops);
  ops::add_quant_norm_operators(ops);
  ops::add_moe_gemm_operators(ops);
  ops::add_attention_operators(ops);
  ops::add_rope_conv_delta_operators(ops);
  ops::attach_edge_cases(ops);
  ops::attach_reduced_shapes(ops);
  return ops;
}

}  // namespace

std::string_view operator_primary_dtype(std::string_view op) {
  static const std::map<std::string_view, std::string_view> kDtypes = {
      {"attention_forward", "bf16"},
      {"block_scaled_mm", "fp8_e4m3"},
      {"causal_conv1d", "bf16"},
      {"chunk_delta_rule_output", "bf16"},
      {"chunk_gated_delta_rule_state", "bf16"},
      {"fp8_blockscale_fused_moe", "fp8_e4m3"},
      {"fp8_dynamic_per_token_quant", "fp8_e4m3"},
      {"fused_add_rms_norm", "bf16"},
      {"fused_moe", "bf16"},
      {"fused_qk_rmsnorm", "fp16"},
      {"fused_qkv_rope", "fp16"},
      {"fused_rmsnorm_quant", "fp8_e4m3"},
      {"gated_delta_rule_update", "bf16"},
      {"gated_rms_norm", "bf16"},
      {"l2_norm", "bf16"},
      {"layer_norm", "bf16"},
      {"linear_sigmoid_mul", "bf16"},
      {"mla_decode_attention", "bf16"},
      {"moe_align_block_size", "int32"},
      {"moe_count_and_sort", "int32"},
      {"moe_sum_reduce", "bf16"},
      {"moe_topk_gating_softmax", "fp32"},
      {"mrope", "bf16"},
      {"paged_attention_decode", "bf16"},
      {"per_token_group_quant_fp8", "fp8_e4m3"},
      {"reshape_and_cache", "bf16"},
      {"rms_norm", "bf16"},
      {"silu_and_mul", "bf16"},
      {"topk_filter", "fp32"},
      {"unified_attention", "bf16"}};
  auto it = kDtypes.find(op);
  return it == kDtypes.end() ? std::string_view() : it->second;
}

std::span<const OperatorDef> native_operators() {
  static const std::vector<OperatorDef> kOps = make_operators();
  return kOps;
}

}  // namespace atrex::problems
