// silu_and_mul and moe_sum_reduce (alibaba/atrex-bench data/<op>/{reference.py,input.py}).
#include "activation_ops.h"
#include "def_helpers.h"

namespace atrex::problems::ops {
namespace {

// silu (exp, add, divide: ~3) and the gate multiply, counted as 5 FLOPs per output element.
RooflineCounts silu_and_mul_roofline(const ResolvedShape& s) {
  return RooflineCounts{
      {{"bf16", 5.0 * static_cast<double>(s.outputs[0].numel())}}, input_bytes(s), output_bytes(s)};
}
// (K - 1) adds per output element plus the scaling multiply.
RooflineCounts moe_sum_reduce_roofline(const ResolvedShape& s) {
  const double k = static_cast<double>(s.int_param("top_k"));
  return RooflineCounts{
      {{"bf16", k * static_cast<double>(s.outputs[0].numel())}}, input_bytes(s), output_bytes(s)};
}

}  // namespace

void add_activation_operators(std::vector<OperatorDef>& ops) {
  ops.push_back(OperatorDef{
      .name = "silu_and_mul",
      .semantics =
          "x: [N, 2d] -> out: [N, d] = bf16(bf16(silu(x[:, :d])) * x[:, d:2d]), silu in fp32.",
      .params = {int_list_param("shape", "input shape [N, 2d]")},
      .inputs = {{.name = "x",
                  .dtype = DType::kBF16,
                  .dims = {"shape[0]", "shape[1]"},
                  .distribution = normal(),
                  .doc = "randn"}},
      .outputs = {{.name = "out",
                   .dtype = DType::kBF16,
                   .dims = {"shape[0]", "shape[1]/2"},
                   .doc = "gated activation"}},
      .reference_cpu = &cpu_ref<silu_and_mul_reference<CpuExec>>,
      .analytic = &silu_and_mul_roofline,
      .range_probe = {.exponent = 8,
                      .inputs = {"x"},
                      .why = "x ~ randn: with x * 2^8 the product silu(a) * b is scaled by ~2^16 "
                             "and passes 65504 wherever "
                             "|a b| > 1 (a quarter of the elements); silu of a scaled negative a "
                             "is -0, exactly as in fp32"},
      .free_dims = {{.param = "shape[0]"}}});
  ops.push_back(OperatorDef{
      .name = "moe_sum_reduce",
      .semantics = "expert_outputs: [T, K, H] -> out: [T, H] = sum over K in fp32, times "
                   "routed_scaling_factor, "
                   "rounded to bf16.",
      .params = {int_param("token_count", "tokens"), int_param("top_k", "experts per token"),
                 int_param("hidden_size", "row length"),
                 float_param("routed_scaling_factor", 1.0, "output scale")},
      .inputs = {{.name = "expert_outputs",
                  .dtype = DType::kBF16,
                  .dims = {"token_count", "top_k", "hidden_size"},
                  .distribution = normal(0.02),
                  .doc = "randn * 0.02"}},
      .outputs = {{.name = "out",
                   .dtype = DType::kBF16,
                   .dims = {"token_count", "hidden_size"},
                   .doc = "reduced rows"}},
      .reference_cpu = &cpu_ref<moe_sum_reduce_reference<CpuExec>>,
      .analytic = &moe_sum_reduce_roofline,
      .range_probe = {.exponent = 20,
                      .inputs = {"expert_outputs"},
                      .why = "expert_outputs ~ 0.02 randn: scaled by 2^20 the sum of top_k (8) "
                             "terms has sigma ~6e4, so about "
                             "a quarter of the sums pass 65504; bf16 holds them"},
      .free_dims = {{.param = "token_count"}}});
}

}  // namespace atrex::problems::ops
