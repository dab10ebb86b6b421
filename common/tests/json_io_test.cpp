#include <gtest/gtest.h>

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
}  // namespace atrex
