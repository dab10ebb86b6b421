// rms_norm, fused_add_rms_norm, l2_norm: signatures and distributions of alibaba/atrex-bench
// data/<op>/{reference.py,input.py} (semantics carried over, not code).
#include "def_helpers.h"
#include "norm_ops.h"

namespace atrex::problems::ops {
namespace {

// FLOPs per element: square, accumulate, scale by rsqrt, times weight (rms_norm); the
// fused variant adds the residual add. Compulsory bytes: every input read once, every output
// written once.
RooflineCounts norm_roofline(const ResolvedShape& s, double flops_per_element) {
  const double elements = static_cast<double>(s.outputs[0].numel());
  return RooflineCounts{{{"bf16", flops_per_element * elements}}, input_bytes(s), output_bytes(s)};
}
RooflineCounts rms_norm_roofline(const ResolvedShape& s) { return norm_roofline(s, 4); }
RooflineCounts fused_add_rms_norm_roofline(const ResolvedShape& s) { return norm_roofline(s, 5); }
RooflineCounts l2_norm_roofline(const ResolvedShape& s) { return norm_roofline(s, 3); }

}  // namespace

void add_norm_operators(std::vector<OperatorDef>& ops) {
  ops.push_back(OperatorDef{
      .name = "rms_norm",
      .semantics =
          "out = x * rsqrt(mean(x^2, dim=-1) + eps) * weight, computed in fp32 from bf16 inputs, "
          "rounded to bf16.",
      .params = {int_param("token_count", "rows of x"), int_param("hidden_size", "row length"),
                 float_param("eps", 1e-6, "added to the mean square")},
      .inputs = {{.name = "x",
                  .dtype = DType::kBF16,
                  .dims = {"token_count", "hidden_size"},
                  .distribution = normal(0.02),
                  .doc = "randn * 0.02"},
                 {.name = "weight",
                  .dtype = DType::kBF16,
                  .dims = {"hidden_size"},
                  .distribution = normal(0.02, 1.0),
                  .doc = "randn * 0.02 + 1"}},
      .outputs = {{.name = "out",
                   .dtype = DType::kBF16,
                   .dims = {"token_count", "hidden_size"},
                   .doc = "normalised rows"}},
      .reference_cpu = &cpu_ref<rms_norm_reference<CpuExec>>,
      .analytic = &rms_norm_roofline,
      .roofline_notes = "W: the traced count (FlopCounterMode) has 3 FLOPs per element + 1 per "
                        "row, leaving out the "
                        "reduction's additions that atrex counts (4 per element); Q matches. "
                        "Memory-bound by ~1000x: "
                        "W does not change T_roofline.",
      .range_probe =
          {.exponent = 11,
           .inputs = {"x"},
           .why =
               "x ~ 0.02 randn: x * 2^11 has rows whose sum of squares passes 2e5 at the smallest "
               "hidden size "
               "(128) while every square stays below 65504; out does not depend on the scale of x"},
      .free_dims = {{.param = "token_count"}}});
  ops.push_back(OperatorDef{
      .name = "fused_add_rms_norm",
      .semantics = "residual_out = bf16(x + residual); out = residual_out * "
                   "rsqrt(mean(residual_out^2) + eps) * "
                   "weight (fp32 arithmetic, bf16 results). Both outputs are separate buffers: "
                   "inputs must stay "
                   "unchanged.",
      .params = {int_param("token_count", "rows"), int_param("hidden_size", "row length"),
                 float_param("eps", 1e-6, "added to the mean square")},
      .inputs = {{.name = "x",
                  .dtype = DType::kBF16,
                  .dims = {"token_count", "hidden_size"},
                  .distribution = normal(0.02),
                  .doc = "randn * 0.02"},
                 {.name = "residual",
                  .dtype = DType::kBF16,
                  .dims = {"token_count", "hidden_size"},
                  .distribution = normal(),
                  .doc = "randn"},
                 {.name = "weight",
                  .dtype = DType::kBF16,
                  .dims = {"hidden_size"},
                  .distribution = normal(0.02, 1.0),
                  .doc = "randn * 0.02 + 1"}},
      .outputs = {{.name = "out",
                   .dtype = DType::kBF16,
                   .dims = {"token_count", "hidden_size"},
                   .doc = "normalised sum"},
                  {.name = "residual",
                   .dtype = DType::kBF16,
                   .dims = {"token_count", "hidden_size"},
                   .doc = "x + residual"}},
      .reference_cpu = &cpu_ref<fused_add_rms_norm_reference<CpuExec>>,
      .analytic = &fused_add_rms_norm_roofline,
      .roofline_notes =
          "W: the traced count has 4 FLOPs per element, leaving out the reduction's additions that "
          "atrex counts (5 per element: add, square, sum, scale, weight); Q matches. Memory-bound: "
          "W does not change T_roofline.",
      .range_probe = {.exponent = 4,
                      .inputs = {"x", "residual"},
                      .why = "x + residual ~ randn: scaled by 2^4 both, rows of 1280 or more sum "
                             "squares past 3e5 while each "
                             "square stays below 65504; out does not depend on the scale, "
                             "residual_out scales exactly"},
      .free_dims = {{.param = "token_count"}}});
  ops.push_back(OperatorDef{
      .name = "l2_norm",
      .semantics = "out = x * rsqrt(sum(x^2, dim=-1) + eps) in fp32 from bf16, rounded to bf16.",
      .params = {int_param("num_tokens", "rows"), int_param("hidden_size", "row length"),
                 float_param("eps", 1e-6, "added to the sum of squares")},
      .inputs = {{.name = "x",
                  .dtype = DType::kBF16,
                  .dims = {"num_tokens", "hidden_size"},
                  .distribution = normal(),
                  .doc = "randn"}},
      .outputs = {{.name = "out",
                   .dtype = DType::kBF16,
                   .dims = {"num_tokens", "hidden_size"},
                   .doc = "unit rows"}},
      .reference_cpu = &cpu_ref<l2_norm_reference<CpuExec>>,
      .analytic = &l2_norm_roofline,
      .range_probe = {.exponent = 4,
                      .inputs = {"x"},
                      .why = "x ~ randn: x * 2^4 rows of 2048 sum squares to ~5e5, each square "
                             "below 65504; out does not "
                             "depend on the scale of x"},
      .free_dims = {{.param = "num_tokens"}}});
}

}  // namespace atrex::problems::ops
