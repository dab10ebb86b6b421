#include <gtest/gtest.h>

#include "atrex/common/untrusted_json.h"
#include "atrex/common/json_io.h"

namespace atrex {
namespace {

TEST(JsonField, MissingFieldNamesFileAndPath) {
  Json j = Json::parse(R"({"a": {"b": 1}})");
  JsonField root(j, "sweep.yaml");
  auto a = root.at("a");
  ASSERT_TRUE(a);
  auto c = a->at("c");
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code, ErrorCode::kInvalidInput);
  EXPECT_EQ(c.error().message, "sweep.yaml: field \"a.c\" is missing");
}

TEST(JsonField, WrongTypeNamesTheValue) {
  Json j = Json::parse(R"({"seeds": "five"})");
  auto v = JsonField(j, "f.yaml").at("seeds")->as_int();
  ASSERT_FALSE(v);
  EXPECT_EQ(v.error().message, "f.yaml: field \"seeds\": expected an integer; got \"five\"");
}

TEST(Yaml, ScalarsBecomeTypedJson) {
  auto j = parse_yaml_to_json("a: 3\nb: 2.5\nc: true\nd: hello\ne: [1, 2]\nf: '7'\n", "x.yaml");
  ASSERT_TRUE(j);
  EXPECT_TRUE((*j)["a"].is_number_integer());
  EXPECT_TRUE((*j)["b"].is_number_float());
  EXPECT_TRUE((*j)["c"].is_boolean());
  EXPECT_EQ((*j)["d"], "hello");
  EXPECT_EQ((*j)["e"].size(), 2u);
  EXPECT_TRUE((*j)["f"].is_string());
}

TEST(Yaml, SyntaxErrorNamesFileAndLine) {
  auto j = parse_yaml_to_json("a: [1, 2\nb: 3\n", "bad.yaml");
  ASSERT_FALSE(j);
  EXPECT_EQ(j.error().code, ErrorCode::kInvalidInput);
  EXPECT_NE(j.error().message.find("bad.yaml: not valid YAML: line"), std::string::npos)
      << j.error().message;
}

TEST(ReadJsonFile, MissingFileIsNotFound) {
  auto j = read_json_file("/nonexistent/atrex.json");
  ASSERT_FALSE(j);
  EXPECT_EQ(j.error().code, ErrorCode::kNotFound);
  EXPECT_EQ(exit_code_for(j.error()), 2);
}

}  // namespace
// Text another process wrote (attack round 9): JSON nested 400000 deep parsed, and the first
// dump() of it (an error message quoting it) overflowed the stack. It is refused at the parse, and
// an error quoting such a value describes it instead of serialising it.
TEST(UntrustedJson, DeepNestingIsRefusedAtTheParseAndNeverSerialised) {
  const std::string deep = std::string(400000, '[') + std::string(400000, ']');
  auto r = parse_untrusted_json(deep);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message, "nested deeper than 32 levels");
  EXPECT_FALSE(parse_untrusted_json("{\"a\": [1, 2").has_value());
  EXPECT_EQ(parse_untrusted_json("{\"a\": [1, 2").error().message, "not JSON");
  auto shallow = parse_untrusted_json(R"({"nonce":"x","timing":{"samples_us":[1.5,2.5]}})");
  ASSERT_TRUE(shallow) << shallow.error().message;
  EXPECT_EQ((*shallow)["timing"]["samples_us"][1], 2.5);
  EXPECT_TRUE(parse_untrusted_json(std::string(32, '[') + std::string(32, ']')));
  EXPECT_FALSE(parse_untrusted_json(std::string(34, '[') + std::string(34, ']')));

  const Json nested = Json::parse(deep);  // what a trusted-looking parse still builds
  EXPECT_TRUE(json_deeper_than(nested, 32));
  EXPECT_FALSE(json_deeper_than(Json::parse("[[1]]"), 2));
  EXPECT_TRUE(json_deeper_than(Json::parse("[[1]]"), 1));
  auto f = JsonField(nested, "line").as_string();
  ASSERT_FALSE(f);
  EXPECT_NE(f.error().message.find("an array nested deeper than 32 levels"), std::string::npos)
      << f.error().message.substr(0, 200);
}

}  // namespace atrex
