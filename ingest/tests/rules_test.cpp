// The rules file: the shipped one loads and covers the suite; bad ones name file and field.
#include <set>

#include <gtest/gtest.h>

#include "atrex/ingest/rules.h"
#include "atrex/problems/operator.h"
#include "classify.h"
#include "trace_util.h"

namespace atrex::ingest {
namespace {

Result<Rules> rules_from(const std::string& yaml) {
  auto dir = testing::temp_dir("r");
  testing::write_file(dir / "rules.yaml", yaml);
  return load_rules(dir / "rules.yaml");
}

TEST(IngestRules, TheShippedRulesCoverEverySuiteFamilyAndGemmCollectivesElementwise) {
  auto rules = load_rules(ATREX_TEST_INGEST_RULES);
  ASSERT_TRUE(rules) << rules.error().message;
  std::set<std::string> families;
  for (const auto& r : rules->rules) families.insert(r.family);
  for (const auto& def : problems::native_operators()) {
    EXPECT_TRUE(families.count(def.name)) << def.name << " has no rule";
  }
  for (const char* f : {"dense_gemm", "collective", "elementwise", "memcpy"}) {
    EXPECT_TRUE(families.count(f)) << f;
  }
  EXPECT_EQ(problems::native_operators().size(), 30u);
}

TEST(IngestRules, ABadPatternNamesTheFileTheFieldAndTheError) {
  auto r = rules_from(
      "version: atrex.ingest-rules/1\nfamilies:\n  - family: rms_norm\n    kernel: 'rms(norm'\n");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidInput);
  EXPECT_NE(r.error().message.find("rules.yaml"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("families[0].kernel"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("rms(norm"), std::string::npos) << r.error().message;
}

TEST(IngestRules, UnknownFieldsMissingPatternsAndAmbiguousSourcesAreRejected) {
  const char* bad[] = {
      "version: atrex.ingest-rules/1\nfamilies:\n  - family: x\n    kernal: 'a'\n",
      "version: atrex.ingest-rules/1\nfamilies:\n  - family: x\n",
      "version: atrex.ingest-rules/1\nfamilies:\n  - family: x\n    op: a\n    input: {n: "
      "{input: 0, dim: 1, prod: [0]}}\n",
      "version: atrex.ingest-rules/1\nfamilies:\n  - family: x\n    op: a\n    input: {n: "
      "{dim: 1}}\n",
      "version: atrex.ingest-rules/1\nfamilies:\n  - family: x\n    op: a\n    when: [{param: "
      "nope, eq: 1}]\n",
      "version: atrex.ingest-rules/2\nfamilies:\n  - family: x\n    op: a\n",
      "version: atrex.ingest-rules/1\nfamilies: []\n",
      "version: atrex.ingest-rules/1\nphases: {prefill: '['}\nfamilies:\n  - {family: x, op: a}\n",
  };
  for (const char* yaml : bad) {
    auto r = rules_from(yaml);
    ASSERT_FALSE(r) << yaml;
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidInput) << yaml;
    EXPECT_NE(r.error().message.find("rules.yaml"), std::string::npos) << r.error().message;
  }
}

ParamSource source(const std::string& yaml) {
  auto r = rules_from("version: atrex.ingest-rules/1\nfamilies:\n  - family: x\n    op: a\n"
                      "    input: {p: " + yaml + "}\n");
  EXPECT_TRUE(r) << (r ? "" : r.error().message);
  return r->rules[0].input[0].second;
}

TEST(IngestRules, SourcesReadDimsSlicesConcreteValuesAndDtypes) {
  OpInputs in;
  in.dims = {{4, 7, 1024}, {2048, 1024}, {}};
  in.types = {"c10::BFloat16", "c10::Float8_e4m3fn", "Scalar"};
  in.concrete = {"", "", "1e-06"};
  auto eval = [&](const std::string& yaml) { return detail::eval_source(source(yaml), in, "op"); };
  EXPECT_EQ(*eval("{input: 0, dim: -1}"), 1024);
  EXPECT_EQ(*eval("{input: 0, prod: [0, -1]}"), 28);
  EXPECT_EQ(*eval("{input: 0, prod: [1]}"), 7 * 1024);
  EXPECT_EQ(*eval("{input: 1, dims: true}"), Json::parse("[2048, 1024]"));
  EXPECT_EQ(*eval("{input: 0, dim: 2, mul: 2}"), 2048);
  EXPECT_EQ(*eval("{input: 0, dim: 2, div: 8}"), 128);
  EXPECT_DOUBLE_EQ(eval("{concrete: 2}")->get<double>(), 1e-6);
  EXPECT_EQ(*eval("{dtype: 0}"), "bf16");
  EXPECT_EQ(*eval("{dtype: 1}"), "fp8_e4m3");
  EXPECT_EQ(*eval("{list: [{input: 0, prod: [0, -1]}, {input: 0, dim: -1, mul: 2}]}"),
            Json::parse("[28, 2048]"));
  EXPECT_EQ(*eval("{repeat: {input: 0, dim: 1}, times: {input: 0, dim: 0}}"),
            Json::parse("[7, 7, 7, 7]"));
  EXPECT_EQ(*eval("16"), 16);
  // What cannot be read is an error that says why (the family then counts "no shape" time).
  auto e1 = eval("{input: 0, dim: 3}");
  ASSERT_FALSE(e1);
  EXPECT_NE(e1.error().message.find("[4, 7, 1024]"), std::string::npos) << e1.error().message;
  EXPECT_FALSE(eval("{input: 5, dim: 0}"));
  EXPECT_FALSE(eval("{input: 0, dim: 1, div: 2}"));  // 7 is odd: no silent rounding
  EXPECT_FALSE(eval("{concrete: 0}"));
  EXPECT_FALSE(eval("{input: 2, dims: true}"));
  // A hostile trace's dims overflow int64: an error, not a wrapped shape.
  OpInputs huge;
  huge.dims = {{int64_t{1} << 40, int64_t{1} << 40}, {-4, 8}};
  EXPECT_FALSE(detail::eval_source(source("{input: 0, prod: [0]}"), huge, "op"));
  EXPECT_FALSE(detail::eval_source(source("{input: 0, dim: 0, mul: 16777216}"), huge, "op"));
  EXPECT_FALSE(detail::eval_source(source("{input: 1, prod: [0]}"), huge, "op"));
}

}  // namespace
}  // namespace atrex::ingest
