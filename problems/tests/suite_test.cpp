#include <cmath>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "atrex/problems/suite.h"

namespace atrex::problems {
namespace {
namespace fs = std::filesystem;

TEST(Suite, BundledSuiteHas30OperatorsAnd440Shapes) {
  auto suite = Suite::load(ATREX_TEST_SUITE_DIR);
  ASSERT_TRUE(suite) << suite.error().message;
  EXPECT_EQ(suite->operators().size(), 30u);
  EXPECT_EQ(suite->num_shapes(), 440u);
}

TEST(Suite, WeightsAreNormalisedImportanceScores) {
  auto suite = Suite::load(ATREX_TEST_SUITE_DIR);
  ASSERT_TRUE(suite);
  double total = 0;
  for (const auto& op : suite->operators()) total += op.weight;
  EXPECT_NEAR(total, 1.0, 1e-12);
  const auto& ops = suite->operators();
  // Paper / brief: the top five come out 0.361, 0.104, 0.085, 0.047, 0.040.
  EXPECT_EQ(ops[0].name, "unified_attention");
  EXPECT_NEAR(ops[0].weight, 0.361, 5e-4);
  EXPECT_NEAR(ops[1].weight, 0.104, 5e-4);
  EXPECT_NEAR(ops[2].weight, 0.085, 5e-4);
  EXPECT_NEAR(ops[3].weight, 0.047, 5e-4);
  EXPECT_NEAR(ops[4].weight, 0.040, 5e-4);
}

TEST(Suite, ShapesAreInNumericIdOrderWithMergedParams) {
  auto suite = Suite::load(ATREX_TEST_SUITE_DIR);
  ASSERT_TRUE(suite);
  const auto* rms = suite->find("rms_norm");
  ASSERT_NE(rms, nullptr);
  ASSERT_EQ(rms->shapes.size(), 56u);
  EXPECT_EQ(rms->shapes[2].id, "2");
  EXPECT_EQ(rms->shapes[10].id, "10");
  EXPECT_EQ(rms->shapes[0].params["token_count"], 2500);
  EXPECT_DOUBLE_EQ(rms->shapes[0].params["eps"].get<double>(), 1e-6);
}

TEST(Suite, RooflineCountsAreEvaluatorSide) {
  auto suite = Suite::load(ATREX_TEST_SUITE_DIR);
  ASSERT_TRUE(suite);
  auto r = suite->roofline("rms_norm", "0");
  ASSERT_TRUE(r);
  EXPECT_DOUBLE_EQ(r->w_flops_by_dtype.at("bf16"), 7682500);
  EXPECT_DOUBLE_EQ(r->q_read_bytes + r->q_write_bytes, 10242048);
  EXPECT_FALSE(suite->roofline("rms_norm", "999"));
}

TEST(Suite, UnknownOperatorListsTheSuite) {
  auto suite = Suite::load(ATREX_TEST_SUITE_DIR);
  ASSERT_TRUE(suite);
  auto op = suite->require("rmsnorm");
  ASSERT_FALSE(op);
  EXPECT_EQ(op.error().code, ErrorCode::kNotFound);
  EXPECT_NE(op.error().message.find("unknown operator \"rmsnorm\""), std::string::npos);
  EXPECT_NE(op.error().message.find("rms_norm"), std::string::npos);
}

class BrokenSuite : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("atrex_suite_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::copy(ATREX_TEST_SUITE_DIR, dir_, fs::copy_options::recursive);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void write(const std::string& rel, const std::string& text) {
    std::ofstream(dir_ / rel, std::ios::trunc) << text;
  }
  fs::path dir_;
};

TEST_F(BrokenSuite, NonIntegerKwargIsAcceptedByLoaderButMissingInputKwargsIsNamed) {
  write("data/l2_norm/shapes.json", R"({"0": {"init_kwargs": {"hidden_size": 8}}})");
  auto suite = Suite::load(dir_);
  ASSERT_FALSE(suite);
  EXPECT_EQ(suite.error().code, ErrorCode::kInvalidInput);
  EXPECT_NE(suite.error().message.find("l2_norm/shapes.json: field \"0.input_kwargs\" is missing"),
            std::string::npos)
      << suite.error().message;
}

TEST_F(BrokenSuite, ConflictingKwargsAreRejected) {
  write(
      "data/l2_norm/shapes.json",
      R"({"0": {"init_kwargs": {"hidden_size": 8}, "input_kwargs": {"num_tokens": 2, "hidden_size": 16}}})");
  write(
      "data/l2_norm/roofline.json",
      R"({"shapes": {"0": {"semantic_W_flops": {"bf16": 1}, "semantic_Q_read_bytes": 1, "semantic_Q_write_bytes": 1}}})");
  auto suite = Suite::load(dir_);
  ASSERT_FALSE(suite);
  EXPECT_NE(suite.error().message.find("conflicts with input_kwargs.hidden_size"),
            std::string::npos)
      << suite.error().message;
}

TEST_F(BrokenSuite, ShapeWithoutRooflineIsNamed) {
  write("data/l2_norm/roofline.json", R"({"shapes": {}})");
  auto suite = Suite::load(dir_);
  ASSERT_FALSE(suite);
  EXPECT_NE(suite.error().message.find("roofline.json: field \"shapes.0\" is missing"),
            std::string::npos)
      << suite.error().message;
}

TEST_F(BrokenSuite, NegativeByteCountIsRejectedWithItsValue) {
  write(
      "data/l2_norm/roofline.json",
      R"({"shapes": {"0": {"semantic_W_flops": {"bf16": 1}, "semantic_Q_read_bytes": -5, "semantic_Q_write_bytes": 1}}})");
  auto suite = Suite::load(dir_);
  ASSERT_FALSE(suite);
  EXPECT_NE(suite.error().message.find("shapes.0.semantic_Q_read_bytes"), std::string::npos)
      << suite.error().message;
  EXPECT_NE(suite.error().message.find("got -5"), std::string::npos) << suite.error().message;
}

TEST_F(BrokenSuite, InvalidJsonNamesTheFile) {
  write("data/rms_norm/shapes.json", "{not json");
  auto suite = Suite::load(dir_);
  ASSERT_FALSE(suite);
  EXPECT_NE(suite.error().message.find("rms_norm/shapes.json: not valid JSON"), std::string::npos);
}

TEST_F(BrokenSuite, OperatorFolderWithoutImportanceEntryIsRejected) {
  fs::create_directories(dir_ / "data" / "mystery_op");
  auto suite = Suite::load(dir_);
  ASSERT_FALSE(suite);
  EXPECT_NE(suite.error().message.find("mystery_op"), std::string::npos);
}

}  // namespace
}  // namespace atrex::problems
