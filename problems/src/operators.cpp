// The native operator table. Signatures and distributions follow alibaba/atrex-bench
// data/<op>/{reference.py,input.py} (semantics carried over, not code).
#include <array>
#include <map>

#include "atrex/problems/operator.h"
#include "ops/activation_ops.h"
#include "ops/executors.h"
#include "ops/norm_ops.h"

namespace atrex::problems {
namespace {

template <void (*Ref)(const CpuExec&, const ResolvedShape&, const void* const*, void* const*)>
void cpu_ref(const ResolvedShape& s, std::span<const void* const> in, std::span<void* const> out) {
  Ref(CpuExec{}, s, in.data(), out.data());
}

Distribution normal(double scale = 1.0, double offset = 0.0) { return Distribution{Distribution::kNormal, scale, offset, 0, 1}; }

ParamSpec int_param(const char* name, const char* doc) { return ParamSpec{name, ParamKind::kInt, true, nullptr, doc}; }
ParamSpec float_param(const char* name, double dflt, const char* doc) {
  return ParamSpec{name, ParamKind::kFloat, false, dflt, doc};
}

std::vector<OperatorDef> make_operators() {
  std::vector<OperatorDef> ops;
  ops.push_back(OperatorDef{
      "rms_norm",
      "out = x * rsqrt(mean(x^2, dim=-1) + eps) * weight, computed in fp32 from bf16 inputs, rounded to bf16.",
      {int_param("token_count", "rows of x"), int_param("hidden_size", "row length"),
       float_param("eps", 1e-6, "added to the mean square")},
      {{"x", DType::kBF16, {"token_count", "hidden_size"}, normal(0.02), "randn * 0.02"},
       {"weight", DType::kBF16, {"hidden_size"}, normal(0.02, 1.0), "randn * 0.02 + 1"}},
      {{"out", DType::kBF16, {"token_count", "hidden_size"}, {}, "normalised rows"}},
      &cpu_ref<ops::rms_norm_reference<CpuExec>>});
  ops.push_back(OperatorDef{
      "fused_add_rms_norm",
      "residual_out = bf16(x + residual); out = residual_out * rsqrt(mean(residual_out^2) + eps) * weight "
      "(fp32 arithmetic, bf16 results). Both outputs are separate buffers: inputs must stay unchanged.",
      {int_param("token_count", "rows"), int_param("hidden_size", "row length"),
       float_param("eps", 1e-6, "added to the mean square")},
      {{"x", DType::kBF16, {"token_count", "hidden_size"}, normal(0.02), "randn * 0.02"},
       {"residual", DType::kBF16, {"token_count", "hidden_size"}, normal(), "randn"},
       {"weight", DType::kBF16, {"hidden_size"}, normal(0.02, 1.0), "randn * 0.02 + 1"}},
      {{"out", DType::kBF16, {"token_count", "hidden_size"}, {}, "normalised sum"},
       {"residual", DType::kBF16, {"token_count", "hidden_size"}, {}, "x + residual"}},
      &cpu_ref<ops::fused_add_rms_norm_reference<CpuExec>>});
  ops.push_back(OperatorDef{
      "silu_and_mul",
      "x: [N, 2d] -> out: [N, d] = bf16(bf16(silu(x[:, :d])) * x[:, d:2d]), silu in fp32.",
      {ParamSpec{"shape", ParamKind::kIntList, true, nullptr, "input shape [N, 2d]"}},
      {{"x", DType::kBF16, {"shape[0]", "shape[1]"}, normal(), "randn"}},
      {{"out", DType::kBF16, {"shape[0]", "shape[1]/2"}, {}, "gated activation"}},
      &cpu_ref<ops::silu_and_mul_reference<CpuExec>>});
  ops.push_back(OperatorDef{
      "l2_norm",
      "out = x * rsqrt(sum(x^2, dim=-1) + eps) in fp32 from bf16, rounded to bf16.",
      {int_param("num_tokens", "rows"), int_param("hidden_size", "row length"),
       float_param("eps", 1e-6, "added to the sum of squares")},
      {{"x", DType::kBF16, {"num_tokens", "hidden_size"}, normal(), "randn"}},
      {{"out", DType::kBF16, {"num_tokens", "hidden_size"}, {}, "unit rows"}},
      &cpu_ref<ops::l2_norm_reference<CpuExec>>});
  ops.push_back(OperatorDef{
      "moe_sum_reduce",
      "expert_outputs: [T, K, H] -> out: [T, H] = sum over K in fp32, times routed_scaling_factor, rounded to bf16.",
      {int_param("token_count", "tokens"), int_param("top_k", "experts per token"),
       int_param("hidden_size", "row length"), float_param("routed_scaling_factor", 1.0, "output scale")},
      {{"expert_outputs", DType::kBF16, {"token_count", "top_k", "hidden_size"}, normal(0.02), "randn * 0.02"}},
      {{"out", DType::kBF16, {"token_count", "hidden_size"}, {}, "reduced rows"}},
      &cpu_ref<ops::moe_sum_reduce_reference<CpuExec>>});
  return ops;
}

}  // namespace

std::string_view operator_primary_dtype(std::string_view op) {
  static const std::map<std::string_view, std::string_view> kDtypes = {
      {"attention_forward", "bf16"},        {"block_scaled_mm", "fp8_e4m3"},
      {"causal_conv1d", "bf16"},            {"chunk_delta_rule_output", "bf16"},
      {"chunk_gated_delta_rule_state", "bf16"}, {"fp8_blockscale_fused_moe", "fp8_e4m3"},
      {"fp8_dynamic_per_token_quant", "fp8_e4m3"}, {"fused_add_rms_norm", "bf16"},
      {"fused_moe", "bf16"},                {"fused_qk_rmsnorm", "fp16"},
      {"fused_qkv_rope", "fp16"},           {"fused_rmsnorm_quant", "fp8_e4m3"},
      {"gated_delta_rule_update", "bf16"},  {"gated_rms_norm", "bf16"},
      {"l2_norm", "bf16"},                  {"layer_norm", "bf16"},
      {"linear_sigmoid_mul", "bf16"},       {"mla_decode_attention", "bf16"},
      {"moe_align_block_size", "int32"},    {"moe_count_and_sort", "int32"},
      {"moe_sum_reduce", "bf16"},           {"moe_topk_gating_softmax", "fp32"},
      {"mrope", "bf16"},                    {"paged_attention_decode", "bf16"},
      {"per_token_group_quant_fp8", "fp8_e4m3"}, {"reshape_and_cache", "bf16"},
      {"rms_norm", "bf16"},                 {"silu_and_mul", "bf16"},
      {"topk_filter", "fp32"},              {"unified_attention", "bf16"}};
  auto it = kDtypes.find(op);
  return it == kDtypes.end() ? std::string_view() : it->second;
}

std::span<const OperatorDef> native_operators() {
  static const std::vector<OperatorDef> kOps = make_operators();
  return kOps;
}

}  // namespace atrex::problems
