// The streaming reducer over results folders written by the real writers: what it scores, what it
// refuses (naming file:line and field), what it merges and drops.
#include <fstream>
#include <map>

#include <gtest/gtest.h>

#include "atrex/scoring/reduce.h"
#include "atrex/scoring/reducer.h"
#include "fixture_writer.h"

namespace atrex::scoring {
namespace {
namespace fs = std::filesystem;
using testing::FixtureShape;
using testing::FixtureSweep;

class ReducerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = problems::Suite::load(ATREX_TEST_SUITE_DIR);
    ASSERT_TRUE(s) << s.error().message;
    suite_ = std::make_unique<problems::Suite>(std::move(*s));
    dir_ = fs::temp_directory_path() /
           ("atrex_reducer_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // rms_norm: 3 shapes correct; silu_and_mul: one of two wrong; l2_norm: no correct candidate.
  FixtureSweep sweep(const std::string& id, const std::string& agent) {
    FixtureSweep f(*suite_, id, "sweep-" + id, {agent}, {"rms_norm", "silu_and_mul", "l2_norm"});
    f.quick(agent, "rms_norm", {"0", 1.0});
    f.evaluated(agent, "rms_norm", {{"0", 50}, {"1", 60}, {"2", 70}});
    f.evaluated(agent, "silu_and_mul", {{"0", 40}, {"1", 0, EvalStatus::kWrongResult}});
    f.failed(agent, "l2_norm", "budget spent");
    return f;
  }
  Result<Report> reduce_folders(const std::vector<fs::path>& dirs) {
    Reducer r(*suite_);
    for (const auto& d : dirs) ATREX_TRY(r.add_folder(d));
    return r.finish("now");
  }
  static const OperatorScore& op(const AgentScore& a, const std::string& name) {
    for (const auto& o : a.operators)
      if (o.name == name) return o;
    ADD_FAILURE() << name;
    return a.operators.front();
  }

  std::unique_ptr<problems::Suite> suite_;
  fs::path dir_;
};

TEST_F(ReducerTest, FolderScoresOnlyTheFinalEvaluationsLikeTheStoreReducer) {
  auto f = sweep("s1", "search");
  f.write(dir_ / "a");
  auto rep = reduce_folders({dir_ / "a"});
  ASSERT_TRUE(rep) << rep.error().message;
  MemoryResultStore store;
  f.fill(store);
  auto via_store = reduce(f.manifest(), store, *suite_, "now");
  ASSERT_TRUE(via_store) << via_store.error().message;
  ASSERT_EQ(rep->agents.size(), 1u);
  const AgentScore& a = rep->agents[0];
  EXPECT_DOUBLE_EQ(a.s_agg, via_store->agents[0].s_agg);
  EXPECT_GT(a.s_agg, 0);
  EXPECT_EQ(op(a, "rms_norm").shapes.size(), 3u);  // the quick record is not scored
  EXPECT_EQ(op(a, "rms_norm").status, "correct");
  EXPECT_EQ(op(a, "silu_and_mul").status, "partially correct");
  EXPECT_EQ(op(a, "l2_norm").status, "incorrect");
  EXPECT_EQ(op(a, "l2_norm").first_error, "budget spent");
  EXPECT_EQ(a.operators_attempted, 3);
  EXPECT_EQ(a.usage.prompt_tokens, 2000);  // two evaluated markers' usage
  EXPECT_EQ(rep->sweeps[0].records_read, 5);
  EXPECT_FALSE(rep->partial);
  // Per-shape detail: the time, T_roofline and bound of each shape (rms_norm is memory-bound).
  const ShapeDetail& d = op(a, "rms_norm").shapes[0];
  ASSERT_TRUE(d.time_us_median);
  EXPECT_NEAR(*d.time_us_median, 50, 5);
  EXPECT_GT(d.t_roofline_us, 0);
  EXPECT_EQ(d.bound, "memory");
}

TEST_F(ReducerTest, TruncatedLastLineIsSkippedWithAWarningAndScoresAreUnchanged) {
  sweep("s1", "search").write(dir_ / "a");
  auto before = reduce_folders({dir_ / "a"});
  ASSERT_TRUE(before);
  std::ofstream(dir_ / "a" / "results.jsonl", std::ios::app) << "{\"key\":\"final/search/x\",\"rec";
  std::vector<std::string> warned;
  Reducer r(*suite_, ReduceOptions{0.9, [&](const std::string& w) { warned.push_back(w); }});
  ASSERT_TRUE(r.add_folder(dir_ / "a"));
  auto after = r.finish("now");
  ASSERT_TRUE(after);
  EXPECT_DOUBLE_EQ(after->agents[0].s_agg, before->agents[0].s_agg);
  ASSERT_EQ(warned.size(), 1u);
  EXPECT_NE(warned[0].find("results.jsonl:10: the last line is not complete"), std::string::npos)
      << warned[0];
  EXPECT_EQ(after->warnings, warned);
}

TEST_F(ReducerTest, MalformedLineInTheMiddleIsAnErrorNamingFileAndLine) {
  sweep("s1", "search").write(dir_ / "a");
  std::ifstream in(dir_ / "a" / "results.jsonl");
  std::string all((std::istreambuf_iterator<char>(in)), {});
  all.insert(all.find('\n') + 1, "{\"key\": \"x\", \"record\": \n");
  std::ofstream(dir_ / "a" / "results.jsonl") << all;
  auto rep = reduce_folders({dir_ / "a"});
  ASSERT_FALSE(rep);
  EXPECT_EQ(rep.error().code, ErrorCode::kInvalidInput);
  EXPECT_NE(rep.error().message.find("results.jsonl:2: not valid JSON"), std::string::npos)
      << rep.error().message;
}

TEST_F(ReducerTest, WrongTypedFieldOfAFinalRecordNamesFileLineAndField) {
  auto f = sweep("s1", "search");
  f.write(dir_ / "a");
  // Rewrite one final record's s_j as a string, through the JSON the writer produced.
  std::ifstream in(dir_ / "a" / "results.jsonl");
  std::string line, out;
  int n = 0, bad_line = 0;
  while (std::getline(in, line)) {
    ++n;
    Json e = Json::parse(line);
    if (!bad_line && e["key"].get<std::string>().find("rms_norm-full") == 0) {
      e["record"]["s_j"] = "fast";
      bad_line = n;
    }
    out += e.dump() + "\n";
  }
  std::ofstream(dir_ / "a" / "results.jsonl") << out;
  auto rep = reduce_folders({dir_ / "a"});
  ASSERT_FALSE(rep);
  EXPECT_NE(rep.error().message.find("results.jsonl:" + std::to_string(bad_line)),
            std::string::npos)
      << rep.error().message;
  EXPECT_NE(rep.error().message.find("s_j"), std::string::npos) << rep.error().message;
}

TEST_F(ReducerTest, MissingOrEmptyResultsAreErrorsNotEmptyReports) {
  auto f = sweep("s1", "search");
  fs::create_directories(dir_ / "a");
  ASSERT_TRUE(write_manifest_file(dir_ / "a", f.manifest()));
  auto missing = reduce_folders({dir_ / "a"});
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);
  std::ofstream(dir_ / "a" / "results.jsonl") << "";
  auto empty = reduce_folders({dir_ / "a"});
  ASSERT_FALSE(empty);
  EXPECT_EQ(empty.error().code, ErrorCode::kInvalidInput);
  EXPECT_NE(empty.error().message.find("holds no records"), std::string::npos);
}

TEST_F(ReducerTest, TheSameSweepTwiceIsCountedOnceAndItsDuplicatesDropped) {
  sweep("s1", "search").write(dir_ / "a");
  fs::copy(dir_ / "a", dir_ / "copy", fs::copy_options::recursive);
  auto once = reduce_folders({dir_ / "a"});
  auto twice = reduce_folders({dir_ / "a", dir_ / "copy"});
  ASSERT_TRUE(once && twice);
  ASSERT_EQ(twice->agents.size(), 1u);
  ASSERT_EQ(twice->sweeps.size(), 1u);
  EXPECT_DOUBLE_EQ(twice->agents[0].s_agg, once->agents[0].s_agg);
  EXPECT_EQ(twice->sweeps[0].records_read, 5);
  EXPECT_EQ(twice->sweeps[0].duplicates_dropped, 3 + 5);  // 3 markers, 5 final records
}

TEST_F(ReducerTest, SweepsOfDifferentAgentsMergeAndSharedNamesAreQualified) {
  sweep("s1", "claude").write(dir_ / "a");
  sweep("s2", "codex").write(dir_ / "b");
  sweep("s3", "codex").write(dir_ / "c");
  auto two = reduce_folders({dir_ / "a", dir_ / "b"});
  ASSERT_TRUE(two) << two.error().message;
  ASSERT_EQ(two->agents.size(), 2u);
  EXPECT_EQ(two->agents[0].agent, "claude");
  EXPECT_EQ(two->agents[1].agent, "codex");
  EXPECT_EQ(two->agents[1].sweep_id, "s2");
  auto three = reduce_folders({dir_ / "a", dir_ / "b", dir_ / "c"});
  ASSERT_TRUE(three);
  ASSERT_EQ(three->agents.size(), 3u);
  EXPECT_EQ(three->agents[1].agent, "codex@sweep-s2");
  EXPECT_EQ(three->agents[2].agent, "codex@sweep-s3");
  EXPECT_FALSE(three->warnings.empty());
}

TEST_F(ReducerTest, ASweepWithoutEveryFinalMarkerIsPartial) {
  FixtureSweep f(*suite_, "s1", "half", {"search"}, {"rms_norm", "l2_norm"});
  f.evaluated("search", "rms_norm", {{"0", 50}});
  f.write(dir_ / "a");
  auto rep = reduce_folders({dir_ / "a"});
  ASSERT_TRUE(rep);
  EXPECT_TRUE(rep->partial);
  EXPECT_EQ(rep->sweeps[0].finals_found, 1);
  EXPECT_EQ(rep->sweeps[0].finals_expected, 2);
  EXPECT_NE(render_markdown(*rep).find("Partial results"), std::string::npos);
}

// A shape of the final evaluation without a record (its task dead-lettered: a judge that failed
// on every delivery, docs/evaluation.md "The judge's own failures") was never shown correct: it
// counts as a failed shape, so the operator is partially correct, not correct, and the report
// is partial. S_i stays the median over the shapes shown correct.
TEST_F(ReducerTest, AFinalEvaluationsShapeWithoutARecordCountsAsFailedNotCorrect) {
  FixtureSweep f(*suite_, "s1", "lost", {"search"}, {"rms_norm"});
  f.evaluated("search", "rms_norm", {{"0", 50}, {"1", 60}, {"2", 70}});
  f.write(dir_ / "a");
  auto whole = reduce_folders({dir_ / "a"});
  ASSERT_TRUE(whole) << whole.error().message;
  EXPECT_EQ(op(whole->agents[0], "rms_norm").status, "correct");
  // The same sweep with shape 2's record gone from results.jsonl.
  const fs::path results = dir_ / "a" / "results.jsonl";
  std::ifstream in(results);
  std::string line, kept;
  int dropped = 0;
  while (std::getline(in, line)) {
    if (line.find("\"shape_id\":\"2\"") != std::string::npos &&
        line.find("\"final/") == std::string::npos) {
      ++dropped;
      continue;
    }
    kept += line + "\n";
  }
  in.close();
  ASSERT_EQ(dropped, 1);
  std::ofstream(results, std::ios::trunc) << kept;
  auto rep = reduce_folders({dir_ / "a"});
  ASSERT_TRUE(rep) << rep.error().message;
  EXPECT_TRUE(rep->partial);
  const OperatorScore& o = op(rep->agents[0], "rms_norm");
  EXPECT_EQ(o.status, "partially correct");
  EXPECT_EQ(o.shapes_correct, 2);
  EXPECT_EQ(o.shapes_evaluated, 3);
  EXPECT_NE(o.first_error.find("shape 2: crashed: no record of this shape"), std::string::npos)
      << o.first_error;
  EXPECT_FALSE(o.candidate_sha256.empty());
  // S_i: the median over shapes 0 and 1 (the mean of their S_j), as the whole sweep scored them.
  std::map<std::string, double> s_j;
  for (const auto& d : op(whole->agents[0], "rms_norm").shapes) {
    ASSERT_TRUE(d.s_j) << d.shape_id;
    s_j[d.shape_id] = *d.s_j;
  }
  EXPECT_DOUBLE_EQ(o.s_i, (s_j.at("0") + s_j.at("1")) / 2);
  EXPECT_NE(o.s_i, op(whole->agents[0], "rms_norm").s_i);
}

TEST_F(ReducerTest, CorrectButFallbackIsTheCorrectnessIllusion) {
  FixtureSweep f(*suite_, "s1", "dsl", {"search"}, {"rms_norm", "silu_and_mul", "l2_norm"});
  FixtureShape vendor{"0", 50};
  vendor.dsl_share = 0.1;
  FixtureShape own{"0", 50};
  own.dsl_share = 1.0;
  FixtureShape torch{"0", 50};  // a Python module with PyTorch operations only
  torch.dsl_share = 0.0;
  torch.file_name = "l2_norm_g0_i1.py";
  f.evaluated("search", "rms_norm", {vendor});
  f.evaluated("search", "silu_and_mul", {own});
  f.evaluated("search", "l2_norm", {torch});
  f.write(dir_ / "a");
  auto rep = reduce_folders({dir_ / "a"});
  ASSERT_TRUE(rep);
  const AgentScore& a = rep->agents[0];
  EXPECT_TRUE(op(a, "rms_norm").fallback);
  EXPECT_FALSE(op(a, "silu_and_mul").fallback);
  EXPECT_TRUE(op(a, "l2_norm").fallback);
  EXPECT_TRUE(op(a, "l2_norm").python);
  EXPECT_FALSE(op(a, "rms_norm").python);
  EXPECT_EQ(a.operators_fallback, 2);
  ASSERT_TRUE(a.dsl_adoption_rate);
  EXPECT_DOUBLE_EQ(*a.dsl_adoption_rate, 1.0 / 3);
  // Which fallbacks were Python candidates (PyTorch) and which native ones (a vendor library).
  EXPECT_NE(render_markdown(*rep).find("rms_norm (10% DSL), l2_norm (0% DSL, Python)"),
            std::string::npos)
      << render_markdown(*rep);
}

TEST_F(ReducerTest, BaselineColumnsComeFromTheBaselinesBestAgent) {
  sweep("s1", "search").write(dir_ / "a");
  FixtureSweep base(*suite_, "b1", "reference", {"ref", "slow"}, {"rms_norm"});
  base.evaluated("ref", "rms_norm", {{"0", 25}, {"1", 30}, {"2", 35}});
  base.evaluated("slow", "rms_norm", {{"0", 500}, {"1", 600}, {"2", 700}});
  base.write(dir_ / "base");
  auto rep = reduce_folders({dir_ / "a"});
  auto b = reduce_folders({dir_ / "base"});
  ASSERT_TRUE(rep && b);
  apply_baseline(*rep, *b, "reference", (dir_ / "base").string());
  const OperatorScore& o = op(rep->agents[0], "rms_norm");
  ASSERT_TRUE(o.baseline_s_i);
  EXPECT_GT(*o.baseline_s_i, o.s_i);
  ASSERT_TRUE(o.shapes[0].baseline_time_us_median);
  EXPECT_NEAR(*o.shapes[0].baseline_time_us_median, 25, 3);
  EXPECT_FALSE(op(rep->agents[0], "silu_and_mul").baseline_s_i);
  EXPECT_NE(render_markdown(*rep).find("baseline S_i"), std::string::npos);
}

TEST_F(ReducerTest, ReportJsonRoundTripsAndItsReaderIsStrict) {
  sweep("s1", "search").write(dir_ / "a");
  auto rep = reduce_folders({dir_ / "a"});
  ASSERT_TRUE(rep);
  const Json j = to_json(*rep);
  auto back = report_from_json(j, "report.json");
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(to_json(*back), j);
  size_t with_shapes = 0;
  while (j["agents"][0]["operators"][with_shapes]["shapes"].empty()) ++with_shapes;
  Json extra = j;
  extra["agents"][0]["operators"][with_shapes]["shapes"][0]["speedup"] = 2;
  auto bad = report_from_json(extra, "report.json");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("speedup"), std::string::npos) << bad.error().message;
  Json missing = j;
  missing["agents"][0].erase("s_agg");
  auto gone = report_from_json(missing, "report.json");
  ASSERT_FALSE(gone);
  EXPECT_NE(gone.error().message.find("s_agg"), std::string::npos) << gone.error().message;
}

}  // namespace
}  // namespace atrex::scoring
