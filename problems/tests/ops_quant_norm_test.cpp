// Unit tests of operator group "quant_norm" (problems/src/ops/quant_norm_defs.cpp): hand-checkable
// cases, generator statistics, the fp8 comparisons, and resolution of every released shape.
#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "atrex/problems/compare.h"
#include "atrex/problems/numeric.h"
#include "atrex/problems/operator.h"
#include "ops/quant_norm_compare.h"
#include "op_test_util.h"

namespace atrex::problems {
namespace {

using test_util::bf16;
using test_util::resolve;
using test_util::run;

using num::bf16_to_float;
using num::float_to_bf16;

std::vector<uint16_t> fp16(std::initializer_list<float> v) {
  std::vector<uint16_t> out;
  for (float f : v) out.push_back(num::float_to_fp16(f));
  return out;
}
std::vector<float> fp8_values(const std::vector<uint8_t>& q) {
  std::vector<float> out;
  for (uint8_t b : q) out.push_back(num::fp8e4m3_to_float(b));
  return out;
}

// Hand values: scale = 3 * fl(1/240) = 0.0125000011; x * fl(1/scale) = x * 79.9999924 rounds to
// the fp8 values 80, -160, 40, 240 (the fnuz range: a 448 range would give 149.33 -> 144 etc.).
TEST(Fp8DynamicPerTokenQuant, RowAmaxMapsTo240TheFnuzMax) {
  auto s = resolve("fp8_dynamic_per_token_quant", {{"token_count", 2}, {"hidden_size", 4}});
  auto x = bf16({1, -2, 0.5, 3, 0, 0, 0, 0});
  std::vector<uint8_t> q(8);
  std::vector<float> scale(2);
  run(s, {x.data()}, {q.data(), scale.data()});
  EXPECT_EQ(fp8_values(q), (std::vector<float>{80, -160, 40, 240, 0, 0, 0, 0}));
  EXPECT_FLOAT_EQ(scale[0], 0.0125f);
  // An all-zero row takes amax clamped to 1e-12 (without the clamp: scale 0, q = 0 * inf = NaN).
  EXPECT_FLOAT_EQ(scale[1], 1e-12f / 240.0f);
}

// Groups of 2: amax 2 and 0.5, each mapped to 448 (e4m3fn, the reference's CUDA branch); an
// all-zero group takes the 1e-10 floor.
TEST(PerTokenGroupQuantFp8, EachGroupHasItsOwnScaleAndAmaxMapsTo448) {
  auto s = resolve("per_token_group_quant_fp8",
                   {{"group_size", 2}, {"token_count", 1}, {"hidden_size", 6}});
  ASSERT_EQ(s.outputs[1].dims, (std::vector<int64_t>{1, 3}));
  auto x = bf16({2, -1, 0.5, 0.25, 0, 0});
  std::vector<uint8_t> q(6);
  std::vector<float> scales(3);
  run(s, {x.data()}, {q.data(), scales.data()});
  EXPECT_EQ(fp8_values(q), (std::vector<float>{448, -224, 448, 224, 0, 0}));
  EXPECT_FLOAT_EQ(scales[0], 2.0f / 448.0f);
  EXPECT_FLOAT_EQ(scales[1], 0.5f / 448.0f);
  EXPECT_FLOAT_EQ(scales[2], 1e-10f);
}

TEST(PerTokenGroupQuantFp8, GroupSizeThatDoesNotDivideHiddenIsRejected) {
  const OperatorDef* def = find_native_operator("per_token_group_quant_fp8");
  Shape sh;
  sh.id = "9";
  sh.params = {{"group_size", 96}, {"token_count", 1}, {"hidden_size", 128}};
  auto r = resolve_shape(*def, sh);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("group_size 96"), std::string::npos) << r.error().message;
}

// residual_out = (3, 4); rstd = 1/sqrt(12.5); normed = bf16(bf16(3 rstd) * 1) = 0.84765625 and
// bf16(bf16(4 rstd) * -0.5) = -0.56640625; scale = 0.84765625 * fl(1/240); q = (240, -160.37 ->
// -160). The default eps (1e-5) moves none of these bf16 values and keeps the zero row finite.
TEST(FusedRmsNormQuant, QuantisesTheBf16NormedRowAndReturnsTheSum) {
  auto s = resolve("fused_rmsnorm_quant", {{"token_count", 2}, {"hidden_size", 2}});
  ASSERT_EQ(s.outputs[1].dims, (std::vector<int64_t>{2, 1}));
  auto x = bf16({1, 2, 1, -2}), r = bf16({2, 2, -1, 2}), w = bf16({1, -0.5});
  std::vector<uint8_t> q(4);
  std::vector<float> scale(2);
  std::vector<uint16_t> res(4);
  run(s, {x.data(), r.data(), w.data()}, {q.data(), scale.data(), res.data()});
  EXPECT_EQ(bf16_to_float(res[0]), 3.0f);
  EXPECT_EQ(bf16_to_float(res[1]), 4.0f);
  EXPECT_EQ(fp8_values(q)[0], 240.0f);
  EXPECT_EQ(fp8_values(q)[1], -160.0f);
  EXPECT_FLOAT_EQ(scale[0], 0.84765625f / 240.0f);
  // Row 1 sums to zero: amax 0 gives scale 1 (not 0, which would make q NaN).
  EXPECT_EQ(scale[1], 1.0f);
  EXPECT_EQ(fp8_values(q)[2], 0.0f);
}

// x = (3, 4), w = (1, 2), z = (0, 2), eps 0: rstd = 1/sqrt(12.5) = 0.28284273.
TEST(GatedRmsNorm, ActivationAndOrderFollowTheParameters) {
  auto x = bf16({3, 4}), w = bf16({1, 2}), z = bf16({0, 2});
  std::vector<uint16_t> out(2);
  auto silu = resolve("gated_rms_norm", {{"rows", 1}, {"hidden_size", 2}, {"eps", 0.0}});
  run(silu, {x.data(), w.data(), z.data()}, {out.data()});
  EXPECT_EQ(bf16_to_float(out[0]), 0.0f);       // silu(0) = 0
  EXPECT_EQ(bf16_to_float(out[1]), 3.984375f);  // 4 rstd 2 silu(2) = 3.98603 -> bf16
  auto sig = resolve("gated_rms_norm",
                     {{"rows", 1}, {"hidden_size", 2}, {"eps", 0.0}, {"activation", "sigmoid"}});
  run(sig, {x.data(), w.data(), z.data()}, {out.data()});
  EXPECT_EQ(bf16_to_float(out[0]), 0.423828125f);  // 3 rstd 0.5 = 0.42426 -> bf16
  EXPECT_EQ(bf16_to_float(out[1]), 1.9921875f);    // 4 rstd 2 sigmoid(2) = 1.99302 -> bf16
  // Gate first: g = (0, 4 silu(2)); normalising g leaves (0, sqrt(2)), times w = (0, 2.828427).
  auto first =
      resolve("gated_rms_norm",
              {{"rows", 1}, {"hidden_size", 2}, {"eps", 0.0}, {"norm_before_gate", false}});
  run(first, {x.data(), w.data(), z.data()}, {out.data()});
  EXPECT_EQ(bf16_to_float(out[0]), 0.0f);
  EXPECT_EQ(bf16_to_float(out[1]), 2.828125f);
}

TEST(GatedRmsNorm, UnknownActivationIsNamed) {
  Shape sh;
  sh.id = "0";
  sh.params = {{"rows", 1}, {"hidden_size", 2}, {"activation", "gelu"}};
  auto r = resolve_shape(*find_native_operator("gated_rms_norm"), sh);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("\"gelu\""), std::string::npos) << r.error().message;
}

// Rank-3 x keeps its shape; rows are normalised over the last dim: (1, 3) has mean 2, var 1,
// so out = (-1 * 1 + 0.5, 1 * 2 + 0) = (-0.5, 2) up to the 1e-5 eps.
TEST(LayerNorm, KeepsRank3ShapeAndNormalisesTheLastDim) {
  auto s = resolve("layer_norm", {{"shape", {2, 1, 2}}});
  ASSERT_EQ(s.inputs[0].dims, (std::vector<int64_t>{2, 1, 2}));
  ASSERT_EQ(s.outputs[0].dims, (std::vector<int64_t>{2, 1, 2}));
  auto x = bf16({1, 3, 5, 5}), w = bf16({1, 2}), b = bf16({0.5, 0});
  std::vector<uint16_t> out(4);
  run(s, {x.data(), w.data(), b.data()}, {out.data()});
  EXPECT_EQ(bf16_to_float(out[0]), -0.5f);
  EXPECT_EQ(bf16_to_float(out[1]), 2.0f);
  EXPECT_EQ(bf16_to_float(out[2]), 0.5f);  // constant row: var 0, out = bias
  EXPECT_EQ(bf16_to_float(out[3]), 0.0f);
}

// One q head, one k head, one v head of d = 2: q = (3, 4) -> fp16(3 rstd) = 0.8486328,
// fp16(4 rstd) = 1.1318359, times q_weight (1, 2); k = (1, 1) has rstd 1, times (0.5, -1); v
// copied.
TEST(FusedQkRmsNorm, NormalisesQAndKHeadsAndCopiesV) {
  auto s = resolve(
      "fused_qk_rmsnorm",
      {{"num_tokens", 1}, {"head_num", 1}, {"kv_head_num", 1}, {"size_per_head", 2}, {"eps", 0.0}});
  ASSERT_EQ(s.inputs[0].dims, (std::vector<int64_t>{1, 6}));
  auto h = fp16({3, 4, 1, 1, 5, -6}), qw = fp16({1, 2}), kw = fp16({0.5, -1});
  std::vector<uint16_t> out(6);
  run(s, {h.data(), qw.data(), kw.data()}, {out.data()});
  std::vector<float> got;
  for (uint16_t v : out) got.push_back(num::fp16_to_float(v));
  EXPECT_EQ(got, (std::vector<float>{0.8486328125f, 2.263671875f, 0.5f, -1.0f, 5.0f, -6.0f}));
}

TEST(FusedQkRmsNorm, Bf16DtypeIsRejectedNotSilentlyRunAsFp16) {
  Shape sh;
  sh.id = "2";
  sh.params = {{"num_tokens", 1}, {"head_num", 4}, {"kv_head_num", 2}, {"dtype", "bf16"}};
  auto r = resolve_shape(*find_native_operator("fused_qk_rmsnorm"), sh);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("\"bf16\""), std::string::npos) << r.error().message;
}

// gate = (1*1 + 2*1 + 0, 1*0.5 - 2*1 + 0.5) = (3, -1); out = bf16(sigmoid(3) * 2) = bf16(1.90515)
// = 1.90625, bf16(sigmoid(-1) * 4) = bf16(1.07577) = 1.078125.
TEST(LinearSigmoidMul, GemmThenBiasThenSigmoidTimesPost) {
  auto s =
      resolve("linear_sigmoid_mul", {{"token_count", 1}, {"hidden_size", 2}, {"out_features", 2}});
  auto x = bf16({1, 2}), w = bf16({1, 1, 0.5, -1}), b = bf16({0, 0.5}), post = bf16({2, 4});
  std::vector<uint16_t> out(2);
  run(s, {x.data(), w.data(), b.data(), post.data()}, {out.data()});
  EXPECT_EQ(bf16_to_float(out[0]), 1.90625f);
  EXPECT_EQ(bf16_to_float(out[1]), 1.078125f);
}

// With input.py's distributions sigmoid(gate) stays within ~0.5 +- 0.02: under the sweep's atol
// (1e-2) a candidate that skips the GEMM (out = 0.5 * post) would pass; the override must not.
TEST(LinearSigmoidMul, ToleranceOverrideRejectsSkippingTheGemm) {
  auto s = resolve("linear_sigmoid_mul",
                   {{"token_count", 8}, {"hidden_size", 512}, {"out_features", 256}});
  std::vector<std::vector<uint16_t>> in;
  for (size_t i = 0; i < s.inputs.size(); ++i) {
    in.emplace_back(static_cast<size_t>(s.inputs[i].numel()));
    generate_input_cpu(s, i, 7, in.back().data());
  }
  std::vector<uint16_t> ref(static_cast<size_t>(s.outputs[0].numel())), lazy(ref.size()),
      near(ref.size());
  run(s, {in[0].data(), in[1].data(), in[2].data(), in[3].data()}, {ref.data()});
  for (size_t i = 0; i < ref.size(); ++i) {
    lazy[i] = float_to_bf16(0.5f * bf16_to_float(in[3][i]));
    near[i] = static_cast<uint16_t>(
        ref[i] + ((i % 3 == 0 && (ref[i] & 0x7f) != 0x7f) ? 1 : 0));  // one bf16 ulp off
  }
  const double atol = *s.def->atol, rtol = *s.def->rtol;
  EXPECT_FALSE(compare_output(s.outputs[0], lazy.data(), ref.data(), atol, rtol).pass);
  EXPECT_TRUE(compare_output(s.outputs[0], lazy.data(), ref.data(), 1e-2, 5e-2)
                  .pass);  // why the override exists
  EXPECT_TRUE(compare_output(s.outputs[0], near.data(), ref.data(), atol, rtol).pass);
}

// ---- fp8 comparisons ----

struct QuantCase {
  ResolvedShape s;
  std::vector<uint16_t> x;
  std::vector<uint8_t> q;
  std::vector<float> scale;
};

QuantCase quantise(uint64_t seed) {
  QuantCase c{resolve("fp8_dynamic_per_token_quant", {{"token_count", 16}, {"hidden_size", 256}}),
              {},
              {},
              {}};
  c.x.resize(16 * 256);
  c.q.resize(16 * 256);
  c.scale.resize(16);
  generate_input_cpu(c.s, 0, seed, c.x.data());
  run(c.s, {c.x.data()}, {c.q.data(), c.scale.data()});
  return c;
}

CompareResult compare_q(const QuantCase& ref, const std::vector<uint8_t>& q,
                        const std::vector<float>& scale) {
  const std::vector<const void*> cand{q.data(), scale.data()}, r{ref.q.data(), ref.scale.data()},
      in{ref.x.data()};
  return ops::compare_fp8_dequantised<1>(ref.s, 0, cand, r, in, 1e-2, 5e-2);
}

TEST(Fp8Compare, OneStepFlipPassesTwoStepsAndPoisonFail) {
  const QuantCase ref = quantise(3);
  ASSERT_TRUE(compare_q(ref, ref.q, ref.scale).pass);
  // Positive fp8 bytes are monotonic: +1 is the next grid value (a one-step rounding flip).
  auto flip = ref.q, two = ref.q, poison = ref.q;
  for (size_t i = 0; i < flip.size(); i += 7) {
    if ((flip[i] & 0x80) == 0 && flip[i] < 0x7d) flip[i] += 1;
  }
  EXPECT_TRUE(compare_q(ref, flip, ref.scale).pass);
  size_t normal = 0;  // a positive normal value, so +2 is two grid steps up
  while (normal < two.size() && !(two[normal] >= 0x20 && two[normal] < 0x70)) ++normal;
  ASSERT_LT(normal, two.size());
  two[normal] = static_cast<uint8_t>(two[normal] + 2);
  EXPECT_FALSE(compare_q(ref, two, ref.scale).pass);
  poison[100] = 0xFF;  // the runner's poison byte is NaN in e4m3
  auto res = compare_q(ref, poison, ref.scale);
  EXPECT_FALSE(res.pass);
  EXPECT_NE(res.message.find("q[0, 100]"), std::string::npos) << res.message;
}

// A candidate quantising with the e4m3fn range (amax / 448) dequantises almost as well, so only
// the scale comparison can catch it. The sweep's atol alone (scales ~0.017) did not, before the
// low-signal rule judged outputs whose max is under 10 x atol against their own scale; now the
// plain comparison rejects it too.
TEST(Fp8Compare, ScaleFromThe448RangeIsRejected) {
  const QuantCase ref = quantise(5);
  std::vector<float> s448(ref.scale);
  for (float& v : s448) v = v * 240.0f / 448.0f;
  const std::vector<const void*> cand{ref.q.data(), s448.data()}, r{ref.q.data(), ref.scale.data()},
      in{ref.x.data()};
  EXPECT_FALSE(ops::compare_scale_relative(ref.s, 1, cand, r, in, 1e-2, 5e-2).pass);
  const CompareResult plain =
      compare_output(ref.s.outputs[1], s448.data(), ref.scale.data(), 1e-2, 5e-2);
  EXPECT_TRUE(plain.low_signal);
  EXPECT_FALSE(plain.pass);
  std::vector<float> ulp(ref.scale);
  for (float& v : ulp) v = std::nextafter(v, 1.0f);
  const std::vector<const void*> near{ref.q.data(), ulp.data()};
  EXPECT_TRUE(ops::compare_scale_relative(ref.s, 1, near, r, in, 1e-2, 5e-2).pass);
}

TEST(Fp8Compare, StepIsTheE4m3GridSpacing) {
  EXPECT_EQ(ops::fp8e4m3_step(0.001), 0.001953125);  // subnormal: 2^-9
  EXPECT_EQ(ops::fp8e4m3_step(1.0), 0.125);
  EXPECT_EQ(ops::fp8e4m3_step(-15.0), 1.0);
  EXPECT_EQ(ops::fp8e4m3_step(16.0), 2.0);
  EXPECT_EQ(ops::fp8e4m3_step(448.0), 32.0);
}

// ---- generators ----

struct Moments {
  double mean, std;
};

Moments moments(const ResolvedShape& s, size_t index, uint64_t seed) {
  std::vector<uint8_t> data(s.inputs[index].bytes());
  generate_input_cpu(s, index, seed, data.data());
  double sum = 0, sum2 = 0;
  const int64_t n = s.inputs[index].numel();
  for (int64_t i = 0; i < n; ++i) {
    const double v = element_as_double(s.inputs[index].dtype, data.data(), i);
    sum += v;
    sum2 += v * v;
  }
  const double mean = sum / static_cast<double>(n);
  return {mean, std::sqrt(sum2 / static_cast<double>(n) - mean * mean)};
}

void expect_moments(const ResolvedShape& s, size_t index, double mean, double std, double tol) {
  const Moments m = moments(s, index, 11);
  EXPECT_NEAR(m.mean, mean, tol) << s.def->name << " input " << s.inputs[index].name;
  EXPECT_NEAR(m.std, std, tol) << s.def->name << " input " << s.inputs[index].name;
}

TEST(QuantNormGenerators, MatchAtrexInputDistributions) {
  expect_moments(
      resolve("fp8_dynamic_per_token_quant", {{"token_count", 64}, {"hidden_size", 1024}}), 0, 0, 1,
      0.02);
  expect_moments(resolve("per_token_group_quant_fp8",
                         {{"group_size", 128}, {"token_count", 64}, {"hidden_size", 1024}}),
                 0, 0, 1, 0.02);
  auto frq = resolve("fused_rmsnorm_quant", {{"token_count", 64}, {"hidden_size", 1024}});
  for (size_t i = 0; i < 2; ++i) expect_moments(frq, i, 0, 1, 0.02);
  expect_moments(frq, 2, 0, 1, 0.1);  // randn weight, not 1-centred (1024 samples)
  auto g = resolve("gated_rms_norm", {{"rows", 512}, {"hidden_size", 128}});
  expect_moments(g, 0, 0, 0.02, 5e-4);
  expect_moments(g, 1, 1, 0.02, 6e-3);  // 128 samples
  expect_moments(g, 2, 0, 1, 0.02);
  auto ln = resolve("layer_norm", {{"shape", {64, 1, 1024}}});
  for (size_t i = 0; i < 3; ++i) expect_moments(ln, i, 0, 1, i == 0 ? 0.02 : 0.1);
  auto qk = resolve("fused_qk_rmsnorm", {{"num_tokens", 64}, {"head_num", 8}, {"kv_head_num", 2}});
  expect_moments(qk, 0, 0, 1, 0.02);
  auto lsm = resolve("linear_sigmoid_mul",
                     {{"token_count", 64}, {"hidden_size", 256}, {"out_features", 512}});
  expect_moments(lsm, 0, 0, 0.02, 5e-4);
  expect_moments(lsm, 1, 0, 1.0 / 16, 1e-3);  // randn * 256^-0.5
  expect_moments(lsm, 2, 0, 0.02, 3e-3);
  expect_moments(lsm, 3, 0, 0.02, 5e-4);
}

// ---- released shapes ----

TEST(QuantNormReleasedShapes, AllResolveAndAnalyticTrafficMatchesTheRelease) {
  auto suite = Suite::load(ATREX_TEST_SUITE_DIR);
  ASSERT_TRUE(suite) << suite.error().message;
  // analytic W / released W, as documented in roofline_notes.
  const std::vector<std::pair<const char*, double>> ops = {{"fp8_dynamic_per_token_quant", 1.0},
                                                           {"per_token_group_quant_fp8", 1.0},
                                                           {"fused_rmsnorm_quant", 1.2},
                                                           {"gated_rms_norm", 1.0},
                                                           {"layer_norm", 1.0},
                                                           {"fused_qk_rmsnorm", 4.0 / 3},
                                                           {"linear_sigmoid_mul", 1.0}};
  for (const auto& [op, w_ratio] : ops) {
    const OperatorDef* def = find_native_operator(op);
    ASSERT_NE(def, nullptr) << op;
    const OperatorInfo* info = suite->find(op);
    ASSERT_NE(info, nullptr) << op;
    ASSERT_FALSE(info->shapes.empty()) << op;
    for (const Shape& shape : info->shapes) {
      auto r = resolve_shape(*def, shape);
      ASSERT_TRUE(r) << r.error().message;
      for (const auto* list : {&r->inputs, &r->outputs}) {
        for (const TensorDesc& t : *list) {
          for (int64_t d : t.dims)
            EXPECT_GT(d, 0) << op << " shape " << shape.id << " tensor " << t.name;
        }
      }
      auto released = suite->roofline(op, shape.id);
      ASSERT_TRUE(released) << released.error().message;
      const RooflineCounts a = def->analytic(*r);
      EXPECT_DOUBLE_EQ(a.q_read_bytes, released->q_read_bytes) << op << " shape " << shape.id;
      EXPECT_DOUBLE_EQ(a.q_write_bytes, released->q_write_bytes) << op << " shape " << shape.id;
      double wa = 0, wr = 0;
      for (const auto& [dt, f] : a.w_flops_by_dtype) wa += f;
      for (const auto& [dt, f] : released->w_flops_by_dtype) wr += f;
      EXPECT_NEAR(wa / wr, w_ratio, 0.01) << op << " shape " << shape.id;
      EXPECT_EQ(a.w_flops_by_dtype.begin()->first, released->w_flops_by_dtype.begin()->first) << op;
    }
  }
}

}  // namespace
}  // namespace atrex::problems
