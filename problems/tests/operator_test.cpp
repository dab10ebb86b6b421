// Hand-checkable cases for each native reference, generator statistics against the Atrex
// input.py distributions, and signature validation.
#include <cmath>
#include <optional>
#include <vector>

#include <gtest/gtest.h>

#include "atrex/problems/numeric.h"
#include "atrex/problems/operator.h"
#include "atrex/problems/suite.h"
#include "op_test_util.h"

namespace atrex::problems {
namespace {

using test_util::bf16;
using test_util::resolve;
using test_util::run;

using num::bf16_to_float;
using num::float_to_bf16;

TEST(RmsNorm, ThreeFourRow) {
  auto s = resolve("rms_norm", {{"token_count", 1}, {"hidden_size", 2}, {"eps", 0.0}});
  auto x = bf16({3, 4}), w = bf16({1, 2});
  std::vector<uint16_t> out(2);
  run(s, {x.data(), w.data()}, {out.data()});
  // mean(x^2) = 12.5, rsqrt = 0.2828427
  EXPECT_EQ(out[0], float_to_bf16(3 * 0.28284271f));
  EXPECT_EQ(out[1], float_to_bf16((4 * 0.28284271f) * 2));
}

TEST(FusedAddRmsNorm, ResidualIsSumAndOutIsNormalisedSum) {
  auto s = resolve("fused_add_rms_norm", {{"token_count", 1}, {"hidden_size", 2}, {"eps", 0.0}});
  auto x = bf16({1, 2}), r = bf16({2, 2}), w = bf16({1, 1});
  std::vector<uint16_t> out(2), res(2);
  run(s, {x.data(), r.data(), w.data()}, {out.data(), res.data()});
  EXPECT_FLOAT_EQ(bf16_to_float(res[0]), 3.0f);
  EXPECT_FLOAT_EQ(bf16_to_float(res[1]), 4.0f);
  EXPECT_EQ(out[0], float_to_bf16(3 * 0.28284271f));
  EXPECT_EQ(out[1], float_to_bf16(4 * 0.28284271f));
}

TEST(SiluAndMul, RoundsActivationBeforeMultiply) {
  auto s = resolve("silu_and_mul", {{"shape", {1, 4}}});
  ASSERT_EQ(s.outputs[0].dims, (std::vector<int64_t>{1, 2}));
  auto x = bf16({0, 1, 2, 3});
  std::vector<uint16_t> out(2);
  run(s, {x.data()}, {out.data()});
  EXPECT_FLOAT_EQ(bf16_to_float(out[0]), 0.0f);
  // silu(1) = 0.7310586 -> bf16 0.73046875; * 3 = 2.19140625 -> bf16 2.1875
  EXPECT_FLOAT_EQ(bf16_to_float(out[1]), 2.1875f);
}

TEST(L2Norm, UnitRow) {
  auto s = resolve("l2_norm", {{"num_tokens", 1}, {"hidden_size", 2}});
  auto x = bf16({3, 4});
  std::vector<uint16_t> out(2);
  run(s, {x.data()}, {out.data()});
  EXPECT_FLOAT_EQ(bf16_to_float(out[0]), 0.6015625f);   // bf16(0.6)
  EXPECT_FLOAT_EQ(bf16_to_float(out[1]), 0.80078125f);  // bf16(0.8)
}

TEST(MoeSumReduce, SumsTopKAndScales) {
  auto s = resolve(
      "moe_sum_reduce",
      {{"token_count", 1}, {"top_k", 3}, {"hidden_size", 2}, {"routed_scaling_factor", 0.5}});
  auto x = bf16({1, 2, 3, 4, 5, 6});
  std::vector<uint16_t> out(2);
  run(s, {x.data()}, {out.data()});
  EXPECT_FLOAT_EQ(bf16_to_float(out[0]), 4.5f);
  EXPECT_FLOAT_EQ(bf16_to_float(out[1]), 6.0f);
}

struct Moments {
  double mean, std;
};

Moments moments(const ResolvedShape& s, size_t index, uint64_t seed) {
  std::vector<uint16_t> data(static_cast<size_t>(s.inputs[index].numel()));
  generate_input_cpu(s, index, seed, data.data());
  double sum = 0, sum2 = 0;
  for (uint16_t v : data) {
    double f = bf16_to_float(v);
    sum += f;
    sum2 += f * f;
  }
  double n = static_cast<double>(data.size()), mean = sum / n;
  return {mean, std::sqrt(sum2 / n - mean * mean)};
}

TEST(Generators, MatchAtrexInputDistributions) {
  auto rms = resolve("rms_norm", {{"token_count", 256}, {"hidden_size", 1024}});
  auto x = moments(rms, 0, 1);  // randn * 0.02
  EXPECT_NEAR(x.mean, 0.0, 5e-4);
  EXPECT_NEAR(x.std, 0.02, 4e-4);
  auto w = moments(rms, 1, 1);  // randn * 0.02 + 1 (1024 samples)
  EXPECT_NEAR(w.mean, 1.0, 3e-3);
  EXPECT_NEAR(w.std, 0.02, 2e-3);
  auto far = resolve("fused_add_rms_norm", {{"token_count", 256}, {"hidden_size", 1024}});
  auto r = moments(far, 1, 1);  // randn
  EXPECT_NEAR(r.mean, 0.0, 0.01);
  EXPECT_NEAR(r.std, 1.0, 0.01);
  auto moe = resolve("moe_sum_reduce", {{"token_count", 64}, {"top_k", 8}, {"hidden_size", 512}});
  EXPECT_NEAR(moments(moe, 0, 3).std, 0.02, 4e-4);
}

TEST(Generators, SeedsGiveFreshInputsAndTensorsAreIndependent) {
  auto s = resolve("fused_add_rms_norm", {{"token_count", 4}, {"hidden_size", 64}});
  std::vector<uint16_t> a(256), b(256), c(256);
  generate_input_cpu(s, 0, 1, a.data());
  generate_input_cpu(s, 0, 2, b.data());
  generate_input_cpu(s, 1, 1, c.data());
  EXPECT_NE(a, b);
  EXPECT_NE(a, c);
  std::vector<uint16_t> a2(256);
  generate_input_cpu(s, 0, 1, a2.data());
  EXPECT_EQ(a, a2);
}

// The CUDA backend stages structured inputs in uninitialised host memory (cuda_ops.cu
// generate_input), so each generator must write every byte: drawn over 0x00 and over 0xFF
// bytes, the tensors must agree. Each operator at its released shape with the fewest
// structured bytes; the moe operators, whose released shapes are hundreds of MiB, at small ones.
TEST(Generators, StructuredGeneratorsWriteEveryByte) {
  auto suite = Suite::load(ATREX_TEST_SUITE_DIR);
  ASSERT_TRUE(suite) << suite.error().message;
  const auto structured_bytes = [](const ResolvedShape& s) {
    size_t n = 0;
    for (size_t i = 0; i < s.inputs.size(); ++i)
      n += s.def->inputs[i].generate ? s.inputs[i].bytes() : 0;
    return n;
  };
  std::vector<ResolvedShape> shapes{resolve("fused_moe", {{"num_experts", 4},
                                                          {"intermediate_size", 64},
                                                          {"top_k", 2},
                                                          {"token_count", 16},
                                                          {"hidden_size", 128}}),
                                    resolve("fp8_blockscale_fused_moe", {{"num_experts", 2},
                                                                         {"intermediate_size", 128},
                                                                         {"top_k", 2},
                                                                         {"token_count", 8},
                                                                         {"hidden_size", 256}})};
  for (const OperatorDef& def : native_operators()) {
    const OperatorInfo* info = suite->find(def.name);
    if (!info || def.name == "fused_moe" || def.name == "fp8_blockscale_fused_moe") continue;
    std::optional<ResolvedShape> best;
    for (const Shape& shape : info->shapes) {
      auto r = resolve_shape(def, shape);
      ASSERT_TRUE(r) << r.error().message;
      if (structured_bytes(*r) > 0 && (!best || structured_bytes(*r) < structured_bytes(*best)))
        best = *r;
    }
    if (best) shapes.push_back(*best);
  }
  ASSERT_GE(shapes.size(), 10u) << "the operators with structured inputs";
  for (const ResolvedShape& s : shapes) {
    ASSERT_LE(structured_bytes(s), size_t{32} << 20)
        << s.def->name << " shape " << s.shape_id << ": too slow here";
    for (size_t i = 0; i < s.inputs.size(); ++i) {
      if (!s.def->inputs[i].generate) continue;
      std::vector<uint8_t> zeros(s.inputs[i].bytes(), 0x00), ones(s.inputs[i].bytes(), 0xFF);
      generate_input_cpu(s, i, 5, zeros.data());
      generate_input_cpu(s, i, 5, ones.data());
      EXPECT_TRUE(zeros == ones) << s.def->name << " shape " << s.shape_id << " input "
                                 << s.inputs[i].name;
    }
  }
}

TEST(Signature, MissingParameterIsNamed) {
  const OperatorDef* def = find_native_operator("rms_norm");
  Shape s;
  s.id = "7";
  s.params = {{"token_count", 4}};
  auto r = resolve_shape(*def, s);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message, "operator rms_norm, shape 7: parameter \"hidden_size\" is missing");
}

TEST(Signature, WrongTypeIsNamedWithValue) {
  const OperatorDef* def = find_native_operator("silu_and_mul");
  Shape s;
  s.id = "0";
  s.params = {{"shape", "1x4"}};
  auto r = resolve_shape(*def, s);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("parameter \"shape\": expected a list of integers; got \"1x4\""),
            std::string::npos)
      << r.error().message;
}

TEST(Signature, UnknownNativeOperatorListsCovered) {
  auto r = require_native_operator("not_an_operator");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("rms_norm"), std::string::npos);
}

}  // namespace
}  // namespace atrex::problems
