// Operator group "quant_norm": fp8_dynamic_per_token_quant, per_token_group_quant_fp8,
// fused_rmsnorm_quant, gated_rms_norm, layer_norm, fused_qk_rmsnorm, linear_sigmoid_mul.
// Signatures and distributions of alibaba/atrex-bench data/<op>/{reference.py,input.py}
// (semantics carried over, not code); choices are documented in docs/operators/quant_norm.md.
#include <cmath>

#include <fmt/format.h>

#include "def_helpers.h"
#include "generate.h"
#include "quant_norm_compare.h"
#include "quant_norm_ops.h"

namespace atrex::problems::ops {
namespace {

double dim(const ResolvedShape& s, const char* name) {
  return static_cast<double>(s.int_param(name));
}

// ---- analytic rooflines: compulsory traffic is every tensor once (input_bytes/output_bytes) ----

// One scaling multiply per element, one divide per row (the amax is comparisons, not FLOPs).
RooflineCounts fp8_dynamic_per_token_quant_roofline(const ResolvedShape& s) {
  const double t = dim(s, "token_count"), h = dim(s, "hidden_size");
  return RooflineCounts{{{"fp8_e4m3", t * h + t}}, input_bytes(s), output_bytes(s)};
}
// One divide per element, one scale per group.
RooflineCounts per_token_group_quant_fp8_roofline(const ResolvedShape& s) {
  const double elements = static_cast<double>(s.inputs[0].numel());
  return RooflineCounts{
      {{"fp8_e4m3", elements + elements / dim(s, "group_size")}}, input_bytes(s), output_bytes(s)};
}
// fused_add_rms_norm's 5 per element (add, square, accumulate, rstd scale, weight) plus the
// quantising divide; rsqrt and the scale per row.
RooflineCounts fused_rmsnorm_quant_roofline(const ResolvedShape& s) {
  const double t = dim(s, "token_count"), h = dim(s, "hidden_size");
  return RooflineCounts{{{"fp8_e4m3", 6 * t * h + 2 * t}}, input_bytes(s), output_bytes(s)};
}
// rms_norm's 4 per element, silu (exp, add, divide) and the gate multiply; rsqrt per row.
RooflineCounts gated_rms_norm_roofline(const ResolvedShape& s) {
  const double r = dim(s, "rows"), h = dim(s, "hidden_size");
  return RooflineCounts{{{"bf16", 8 * r * h + r}}, input_bytes(s), output_bytes(s)};
}
// Mean (1), centre (1), square + accumulate (2), rstd scale (1), weight (1), bias (1).
RooflineCounts layer_norm_roofline(const ResolvedShape& s) {
  return RooflineCounts{
      {{"bf16", 7.0 * static_cast<double>(s.outputs[0].numel())}}, input_bytes(s), output_bytes(s)};
}
// rms_norm's 4 per normalised element (q and k heads; v is a copy), rsqrt per head.
RooflineCounts fused_qk_rmsnorm_roofline(const ResolvedShape& s) {
  const double heads = dim(s, "num_tokens") * (dim(s, "head_num") + dim(s, "kv_head_num"));
  return RooflineCounts{
      {{"fp16", 4 * heads * dim(s, "size_per_head") + heads}}, input_bytes(s), output_bytes(s)};
}
// The GEMM (2 T N H), then bias add, sigmoid (exp, add, divide) and the multiply per output.
RooflineCounts linear_sigmoid_mul_roofline(const ResolvedShape& s) {
  const double t = dim(s, "token_count"), h = dim(s, "hidden_size"), n = dim(s, "out_features");
  return RooflineCounts{{{"bf16", 2 * t * n * h + 5 * t * n}}, input_bytes(s), output_bytes(s)};
}

// ---- resolve hooks and generators ----

Result<void> resolve_per_token_group_quant_fp8(ResolvedShape& s) {
  const int64_t h = s.int_param("hidden_size"), g = s.int_param("group_size");
  if (g < 1 || h % g != 0) {
    return invalid_input(
        fmt::format("group_size {} must be positive and divide hidden_size {}", g, h));
  }
  s.outputs[1].dims[1] = h / g;
  return ok();
}

Result<void> resolve_fused_rmsnorm_quant(ResolvedShape& s) {
  s.outputs[1].dims[1] = 1;  // the reference keeps amax's keepdim
  return ok();
}

Result<void> resolve_gated_rms_norm(ResolvedShape& s) {
  const std::string act = s.params.value("activation", std::string("silu"));
  if (gate_activation(act) < 0) {
    return invalid_input(fmt::format(
        "parameter \"activation\": expected \"silu\", \"swish\" or \"sigmoid\"; got \"{}\"", act));
  }
  return ok();
}

// x and out take the full `shape` (rank 2 or 3 in the suite); an empty shape is input.py's (1,).
Result<void> resolve_layer_norm(ResolvedShape& s) {
  std::vector<int64_t> dims = s.params["shape"].get<std::vector<int64_t>>();
  if (dims.empty()) dims = {1};
  for (int64_t d : dims) {
    if (d < 1)
      return invalid_input(
          fmt::format("parameter \"shape\": every dim must be positive; got {}", d));
  }
  s.inputs[0].dims = dims;
  s.outputs[0].dims = dims;
  return ok();
}

Result<void> resolve_fused_qk_rmsnorm(ResolvedShape& s) {
  const std::string dtype = s.params.value("dtype", std::string("fp16"));
  if (dtype != "fp16") {
    return invalid_input(fmt::format(
        "parameter \"dtype\": only \"fp16\" is defined (every released shape); got \"{}\"", dtype));
  }
  const int64_t hidden =
      (s.int_param("head_num") + 2 * s.int_param("kv_head_num")) * s.int_param("size_per_head");
  s.inputs[0].dims[1] = hidden;
  s.outputs[0].dims[1] = hidden;
  return ok();
}

// randn(out_features, hidden_size) * hidden_size^-0.5 in bf16, rounded after each step: the
// scale depends on a parameter, which a static Distribution cannot express.
void generate_linear_weight(const ResolvedShape& s, size_t index, uint64_t seed, void* data) {
  const float scale = static_cast<float>(std::pow(dim(s, "hidden_size"), -0.5));
  const GenerateFn f{
      Distribution::kNormal, scale, 0.0f, 0.0, 1.0, gen_dtype(s.inputs[index].dtype), data, seed,
      input_stream_id(index)};
  parallel_for_cpu(s.inputs[index].numel(), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) f(i);
  });
}

const char* kFp8CompareDoc =
    " Comparison: the fp8 output is compared dequantised (q * scale, each side with its own "
    "scale): "
    "|q_c s_c - q_r s_r| <= step_fp8(q_r) s_r + rtol |q_r s_r| (one e4m3 step at the reference's "
    "magnitude); "
    "scales are compared relative to their magnitude, |c - r| <= rtol |r| (atol would accept a 2x "
    "scale).";

}  // namespace

void add_quant_norm_operators(std::vector<OperatorDef>& ops) {
  ops.push_back(OperatorDef{
      .name = "fp8_dynamic_per_token_quant",
      .semantics = std::string("Per-row fp8 quantisation with the range of float8_e4m3fnuz (max "
                               "240), stored as e4m3fn: "
                               "scale = max(amax|x_row|, 1e-12) * fl32(1/240); q = fp8(clamp(x * "
                               "fl32(1/scale), -240, "
                               "240)), fp32 arithmetic from bf16 x.") +
                   kFp8CompareDoc,
      .params = {int_param("token_count", "rows of x"), int_param("hidden_size", "row length")},
      .inputs = {{.name = "x",
                  .dtype = DType::kBF16,
                  .dims = {"token_count", "hidden_size"},
                  .distribution = normal(),
                  .doc = "randn"}},
      .outputs = {{.name = "q",
                   .dtype = DType::kFP8E4M3,
                   .dims = {"token_count", "hidden_size"},
                   .doc = "quantised rows (|q| <= 240)",
                   .compare = &compare_fp8_dequantised<1>},
                  {.name = "scale",
                   .dtype = DType::kF32,
                   .dims = {"token_count"},
                   .doc = "per-row dequantisation scale",
                   .compare = &compare_scale_relative}},
      .reference_cpu = &cpu_ref<fp8_dynamic_per_token_quant_reference<CpuExec>>,
      .analytic = &fp8_dynamic_per_token_quant_roofline,
      .roofline_notes = "matches the released counts (T*H + T FLOPs; 2TH read, TH + 4T written)",
      .free_dims = {{.param = "token_count"}}});
  ops.push_back(OperatorDef{
      .name = "per_token_group_quant_fp8",
      .semantics =
          std::string(
              "Per-group fp8 e4m3fn quantisation (the reference's CUDA branch): x [T, H] viewed as "
              "groups of group_size; scales = max(amax|group| * fl32(1/448), 1e-10); quantized = "
              "fp8(clamp(x / scale, -448, 448)), fp32 arithmetic from bf16 x.") +
          kFp8CompareDoc,
      .params = {int_param("group_size", "elements per quantisation group; divides hidden_size"),
                 int_param("token_count", "rows of x"), int_param("hidden_size", "row length")},
      .inputs = {{.name = "x",
                  .dtype = DType::kBF16,
                  .dims = {"token_count", "hidden_size"},
                  .distribution = normal(),
                  .doc = "randn (no input.py was released; as fp8_dynamic_per_token_quant)"}},
      .outputs = {{.name = "quantized",
                   .dtype = DType::kFP8E4M3,
                   .dims = {"token_count", "hidden_size"},
                   .doc = "quantised values (|q| <= 448)",
                   .compare = &compare_fp8_dequantised<1>},
                  {.name = "scales",
                   .dtype = DType::kF32,
                   .dims = {"token_count", "=hidden_size/group_size"},
                   .doc = "per-group scales, row-major",
                   .compare = &compare_scale_relative}},
      .reference_cpu = &cpu_ref<per_token_group_quant_fp8_reference<CpuExec>>,
      .resolve = &resolve_per_token_group_quant_fp8,
      .analytic = &per_token_group_quant_fp8_roofline,
      .roofline_notes =
          "matches the released counts (T*H + T*H/G FLOPs; 2TH read, TH + 4TH/G written)",
      .free_dims = {{.param = "token_count"}}});
  ops.push_back(OperatorDef{
      .name = "fused_rmsnorm_quant",
      .semantics =
          std::string(
              "residual_out = bf16(x + residual); normed = bf16(bf16(r * rsqrt(mean(r^2) + eps)) * "
              "weight) (F.rms_norm's ATen composite: two bf16 roundings); scale = amax|normed_row| "
              "* "
              "fl32(1/240), 1 where 0; quantized = fp8(normed / scale) with the float8_e4m3fnuz "
              "range "
              "(max 240) stored as e4m3fn.") +
          kFp8CompareDoc,
      .params = {int_param("token_count", "rows"), int_param("hidden_size", "row length"),
                 float_param("eps", 1e-5, "added to the mean square")},
      .inputs = {{.name = "x",
                  .dtype = DType::kBF16,
                  .dims = {"token_count", "hidden_size"},
                  .distribution = normal(),
                  .doc = "randn"},
                 {.name = "residual",
                  .dtype = DType::kBF16,
                  .dims = {"token_count", "hidden_size"},
                  .distribution = normal(),
                  .doc = "randn"},
                 {.name = "weight",
                  .dtype = DType::kBF16,
                  .dims = {"hidden_size"},
                  .distribution = normal(),
                  .doc = "randn"}},
      .outputs = {{.name = "quantized",
                   .dtype = DType::kFP8E4M3,
                   .dims = {"token_count", "hidden_size"},
                   .doc = "quantised normalised rows (|q| <= 240)",
                   .compare = &compare_fp8_dequantised<1>},
                  {.name = "scale",
                   .dtype = DType::kF32,
                   .dims = {"token_count", "=1"},
                   .doc = "per-row scale, [T, 1]",
                   .compare = &compare_scale_relative},
                  {.name = "residual_out",
                   .dtype = DType::kBF16,
                   .dims = {"token_count", "hidden_size"},
                   .doc = "x + residual"}},
      .reference_cpu = &cpu_ref<fused_rmsnorm_quant_reference<CpuExec>>,
      .resolve = &resolve_fused_rmsnorm_quant,
      .analytic = &fused_rmsnorm_quant_roofline,
      .roofline_notes = "W +20%: 6 FLOPs per element (fused_add_rms_norm's 5 plus the quantising "
                        "divide) where the "
                        "release counts 5; Q matches",
      .range_probe = {.exponent = 4,
                      .inputs = {"x", "residual"},
                      .why = "x + residual ~ sqrt(2) randn: scaled by 2^4 both, rows of 2048 sum "
                             "squares past 1e6 while each "
                             "square stays below 65504; quantized and scale do not depend on the "
                             "scale, residual_out scales"},
      .free_dims = {{.param = "token_count"}}});
  ops.push_back(OperatorDef{
      .name = "gated_rms_norm",
      .semantics = "norm_before_gate: out = bf16((x * rsqrt(mean(x^2) + eps)) * weight * act(z)); "
                   "otherwise g = x * "
                   "act(z) is normalised instead. act = silu (\"silu\"/\"swish\") or sigmoid; fp32 "
                   "arithmetic from "
                   "bf16, one rounding.",
      .params = {int_param("rows", "rows of x and z"), int_param("hidden_size", "row length"),
                 float_param("eps", 1e-6, "added to the mean square"),
                 bool_param("norm_before_gate", true,
                            "normalise x, then gate (true) or gate, then normalise"),
                 string_param("activation", "silu", "\"silu\", \"swish\" (= silu) or \"sigmoid\"")},
      .inputs = {{.name = "x",
                  .dtype = DType::kBF16,
                  .dims = {"rows", "hidden_size"},
                  .distribution = normal(0.02),
                  .doc = "randn * 0.02"},
                 {.name = "weight",
                  .dtype = DType::kBF16,
                  .dims = {"hidden_size"},
                  .distribution = normal(0.02, 1.0),
                  .doc = "randn * 0.02 + 1"},
                 {.name = "z",
                  .dtype = DType::kBF16,
                  .dims = {"rows", "hidden_size"},
                  .distribution = normal(),
                  .doc = "randn (randn_like(x))"}},
      .outputs = {{.name = "out",
                   .dtype = DType::kBF16,
                   .dims = {"rows", "hidden_size"},
                   .doc = "gated norm"}},
      .reference_cpu = &cpu_ref<gated_rms_norm_reference<CpuExec>>,
      .resolve = &resolve_gated_rms_norm,
      .analytic = &gated_rms_norm_roofline,
      .roofline_notes = "matches the released counts (8RH + R FLOPs)",
      .range_probe = {.exponent = 11,
                      .inputs = {"x"},
                      .why =
                          "x ~ 0.02 randn, rows of 128: as rms_norm, x * 2^11 rows sum squares "
                          "past 2e5, each square below "
                          "65504; out does not depend on the scale of x (either norm_before_gate)"},
      .free_dims = {{.param = "rows"}}});
  ops.push_back(OperatorDef{
      .name = "layer_norm",
      .semantics = "out = bf16(((x - mean) * rsqrt(var + 1e-5)) * weight + bias) over the last dim "
                   "of x (biased "
                   "variance, F.layer_norm on fp32 copies of the bf16 inputs).",
      .params = {int_list_param("shape", "shape of x; normalised over the last dim")},
      .inputs = {{.name = "x",
                  .dtype = DType::kBF16,
                  .dims = {"=shape"},
                  .distribution = normal(),
                  .doc = "randn"},
                 {.name = "weight",
                  .dtype = DType::kBF16,
                  .dims = {"shape[-1]"},
                  .distribution = normal(),
                  .doc = "randn"},
                 {.name = "bias",
                  .dtype = DType::kBF16,
                  .dims = {"shape[-1]"},
                  .distribution = normal(),
                  .doc = "randn"}},
      .outputs =
          {{.name = "out", .dtype = DType::kBF16, .dims = {"=shape"}, .doc = "normalised x"}},
      .reference_cpu = &cpu_ref<layer_norm_reference<CpuExec>>,
      .resolve = &resolve_layer_norm,
      .analytic = &layer_norm_roofline,
      .roofline_notes = "matches the released counts (7 FLOPs per element)",
      .range_probe = {.exponent = 4,
                      .inputs = {"x"},
                      .why = "x ~ randn: x * 2^4 rows of 1152 or more sum squared deviations past "
                             "2e5, each below 65504; out "
                             "does not depend on the scale of x"},
      .free_dims = {{.param = "shape[0]"}}});
  ops.push_back(OperatorDef{
      .name = "fused_qk_rmsnorm",
      .semantics = "hidden_states [T, (Hq + 2 Hkv) d] = [q | k | v]: every q head and k head is "
                   "RMS-normalised over d "
                   "in fp32, rounded to fp16, then multiplied by q_weight / k_weight in fp16; v is "
                   "copied. out has "
                   "the layout of hidden_states.",
      .params = {int_param("num_tokens", "rows"), int_param("head_num", "q heads (Hq)"),
                 int_param("kv_head_num", "k and v heads (Hkv)"),
                 optional_int_param("size_per_head", 128, "head dim d"),
                 float_param("eps", 1e-6, "added to the mean square"),
                 string_param("dtype", "fp16", "element type; only \"fp16\" is defined")},
      .inputs = {{.name = "hidden_states",
                  .dtype = DType::kF16,
                  .dims = {"num_tokens", "=(head_num + 2*kv_head_num)*size_per_head"},
                  .distribution = normal(),
                  .doc = "randn"},
                 {.name = "q_weight",
                  .dtype = DType::kF16,
                  .dims = {"size_per_head"},
                  .distribution = normal(),
                  .doc = "randn"},
                 {.name = "k_weight",
                  .dtype = DType::kF16,
                  .dims = {"size_per_head"},
                  .distribution = normal(),
                  .doc = "randn"}},
      .outputs = {{.name = "out",
                   .dtype = DType::kF16,
                   .dims = {"num_tokens", "=(head_num + 2*kv_head_num)*size_per_head"},
                   .doc = "[normed q | normed k | v]"}},
      .reference_cpu = &cpu_ref<fused_qk_rmsnorm_reference<CpuExec>>,
      .resolve = &resolve_fused_qk_rmsnorm,
      .analytic = &fused_qk_rmsnorm_roofline,
      .roofline_notes =
          "W +33%: rms_norm's 4 FLOPs per normalised element where the release counts 3; Q matches",
      .range_probe = {.exponent = 6,
                      .inputs = {"hidden_states"},
                      .why = "fp16 hidden_states ~ randn: times 2^6 (|x| < 400, still fp16) each "
                             "head of 128 sums squares "
                             "to ~5e5; normed q and k do not depend on the scale, v is copied; the "
                             "weights are not scaled"},
      .free_dims = {{.param = "num_tokens"}}});
  ops.push_back(OperatorDef{
      .name = "linear_sigmoid_mul",
      .semantics =
          "gate = bf16(hidden_states @ weight^T + bias) (fp32 accumulation, one rounding); out = "
          "bf16(sigmoid(gate) * post_mul_mat) in fp32. Tolerance override atol 1e-5, rtol 1e-2: "
          "outputs "
          "are ~1e-2, so the sweep's atol 1e-2 would accept out = 0.5 * post_mul_mat (no GEMM at "
          "all); a "
          "correct bf16 candidate is within one bf16 ulp (<= 2^-7 relative).",
      .params = {int_param("token_count", "rows (T)"),
                 int_param("hidden_size", "reduction length (H)"),
                 int_param("out_features", "gate width (N)")},
      .inputs = {{.name = "hidden_states",
                  .dtype = DType::kBF16,
                  .dims = {"token_count", "hidden_size"},
                  .distribution = normal(0.02),
                  .doc = "randn * 0.02"},
                 {.name = "weight",
                  .dtype = DType::kBF16,
                  .dims = {"out_features", "hidden_size"},
                  .doc = "randn * hidden_size^-0.5",
                  .generate = &generate_linear_weight},
                 {.name = "bias",
                  .dtype = DType::kBF16,
                  .dims = {"out_features"},
                  .distribution = normal(0.02),
                  .doc = "randn * 0.02"},
                 {.name = "post_mul_mat",
                  .dtype = DType::kBF16,
                  .dims = {"token_count", "out_features"},
                  .distribution = normal(0.02),
                  .doc = "randn * 0.02"}},
      .outputs = {{.name = "out",
                   .dtype = DType::kBF16,
                   .dims = {"token_count", "out_features"},
                   .doc = "sigmoid(gate) * post_mul_mat"}},
      .reference_cpu = &cpu_ref<linear_sigmoid_mul_reference<CpuExec>>,
      .analytic = &linear_sigmoid_mul_roofline,
      .atol = 1e-5,
      .rtol = 1e-2,
      .roofline_notes = "W within 0.1% (bias, sigmoid and multiply counted as 5 per output where "
                        "the release counts "
                        "1); Q matches",
      .free_dims = {{.param = "token_count"}}});
}

}  // namespace atrex::problems::ops
