// The one-pass reader of results.jsonl (ReadMode::kOnePass, the default) against the
// straightforward two-pass reader it replaced (ReadMode::kTwoPasses): the same report, the same
// warnings and the same errors, on folders with the layouts a writer, a copy or a crash leave.
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "atrex/scoring/reducer.h"
#include "fixture_writer.h"

namespace atrex::scoring {
namespace {
namespace fs = std::filesystem;
using testing::FixtureSweep;

class ReducerFastTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = problems::Suite::load(ATREX_TEST_SUITE_DIR);
    ASSERT_TRUE(s) << s.error().message;
    suite_ = std::make_unique<problems::Suite>(std::move(*s));
    dir_ = fs::temp_directory_path() /
           ("atrex_reducer_fast_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  void write_sweep(const fs::path& dir, const std::string& id) {
    FixtureSweep f(*suite_, id, "sweep-" + id, {"a1", "a2"}, {"rms_norm", "silu_and_mul", "l2_norm"});
    for (const char* agent : {"a1", "a2"}) {
      f.quick(agent, "rms_norm", {"0", 1.0});
      f.quick(agent, "silu_and_mul", {"1", 3.0});
      f.evaluated(agent, "rms_norm", {{"0", 50}, {"1", 60}, {"2", 70}});
      f.evaluated(agent, "silu_and_mul", {{"0", 40}, {"1", 0, EvalStatus::kWrongResult}});
    }
    f.failed("a1", "l2_norm", "budget spent");
    f.write(dir);
  }
  static std::vector<std::string> lines_of(const fs::path& file) {
    std::ifstream in(file);
    std::vector<std::string> out;
    for (std::string l; std::getline(in, l);) out.push_back(l);
    return out;
  }
  static void write_lines(const fs::path& file, const std::vector<std::string>& lines,
                          bool final_newline = true) {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    for (size_t i = 0; i < lines.size(); ++i) {
      out << lines[i];
      if (i + 1 < lines.size() || final_newline) out << '\n';
    }
  }

  struct Outcome {
    std::string report;  // atrex.report/1 JSON, or the error
    std::vector<std::string> warnings;
    int64_t progress_bytes = 0;
  };
  Outcome reduce(const std::vector<fs::path>& dirs, ReadMode mode) {
    Outcome o;
    ReduceOptions opt;
    opt.warn = [&](const std::string& w) { o.warnings.push_back(w); };
    opt.progress = [&](int64_t b) { o.progress_bytes += b; };
    opt.read_mode = mode;
    Reducer r(*suite_, opt);
    for (const auto& d : dirs) {
      if (auto a = r.add_folder(d); !a) {
        o.report = "error: " + a.error().message;
        return o;
      }
    }
    auto rep = r.finish("now");
    o.report = rep ? to_json(*rep).dump(1) : "error: " + rep.error().message;
    return o;
  }
  // Both readers, compared; returns the one-pass outcome.
  Outcome same_from_both(const std::vector<fs::path>& dirs) {
    const Outcome fast = reduce(dirs, ReadMode::kOnePass);
    const Outcome slow = reduce(dirs, ReadMode::kTwoPasses);
    EXPECT_EQ(fast.report, slow.report);
    EXPECT_EQ(fast.warnings, slow.warnings);
    // Progress is the meter's input: the bytes read, counted alike unless reading stopped early.
    if (!fast.report.starts_with("error: ")) {
      EXPECT_EQ(fast.progress_bytes, slow.progress_bytes);
    }
    return fast;
  }

  std::unique_ptr<problems::Suite> suite_;
  fs::path dir_;
};

TEST_F(ReducerFastTest, WritersLayoutGivesTheSameReport) {
  write_sweep(dir_ / "a", "s1");
  const Outcome o = same_from_both({dir_ / "a"});
  EXPECT_FALSE(o.report.starts_with("error: ")) << o.report;
  EXPECT_NE(o.report.find("\"s_agg\""), std::string::npos);
  EXPECT_EQ(o.progress_bytes,
            static_cast<int64_t>(fs::file_size(dir_ / "a" / "results.jsonl")));
}

TEST_F(ReducerFastTest, OtherLayoutsDuplicatesBlankLinesAndACopyGiveTheSameReport) {
  write_sweep(dir_ / "a", "s1");
  auto lines = lines_of(dir_ / "a" / "results.jsonl");
  std::vector<std::string> out;
  for (size_t i = 0; i < lines.size(); ++i) {
    Json e = Json::parse(lines[i]);
    const std::string key = e["key"];
    if (i % 3 == 1) {
      // Members in the other order and spaced: not the writer's layout, parsed in full.
      out.push_back("{ \"record\": " + e["record"].dump() + ", \"key\": " + Json(key).dump() + " }");
    } else {
      out.push_back(lines[i]);
    }
    if (i % 4 == 0) out.push_back("");
    if (i % 5 == 2) out.push_back(lines[i]);  // a duplicate, dropped by key
  }
  write_lines(dir_ / "a" / "results.jsonl", out);
  write_sweep(dir_ / "b", "s2");
  fs::copy(dir_ / "a", dir_ / "copy", fs::copy_options::recursive);
  const Outcome o = same_from_both({dir_ / "a", dir_ / "b", dir_ / "copy"});
  EXPECT_FALSE(o.report.starts_with("error: ")) << o.report;
  EXPECT_NE(o.report.find("\"duplicates_dropped\""), std::string::npos);
}

TEST_F(ReducerFastTest, ATornLastRecordIsWarnedOfByBothReaders) {
  write_sweep(dir_ / "a", "s1");
  auto lines = lines_of(dir_ / "a" / "results.jsonl");
  // The last final record line (its marker after it is dropped), cut just after a '}' inside
  // it: the writer's layout at a glance (it ends with '}'), not JSON.
  size_t last_record = 0;
  for (size_t i = 0; i < lines.size(); ++i)
    if (lines[i].find("-full") != std::string::npos && lines[i].find("\"final/") == std::string::npos)
      last_record = i;
  std::vector<std::string> out(lines.begin(), lines.begin() + static_cast<long>(last_record));
  for (size_t i = last_record + 1; i < lines.size(); ++i) out.push_back(lines[i]);
  const std::string& torn = lines[last_record];
  out.push_back(torn.substr(0, torn.find('}', torn.size() / 2) + 1));
  write_lines(dir_ / "a" / "results.jsonl", out, false);
  const Outcome o = same_from_both({dir_ / "a"});
  ASSERT_EQ(o.warnings.size(), 1u) << o.report;
  EXPECT_NE(o.warnings[0].find("the last line is not complete JSON"), std::string::npos);
}

TEST_F(ReducerFastTest, ATornLastMarkerWithoutNewlineIsWarnedOfOnce) {
  write_sweep(dir_ / "a", "s1");
  std::ofstream(dir_ / "a" / "results.jsonl", std::ios::app) << "{\"key\":\"final/a1/x\",\"rec";
  const Outcome o = same_from_both({dir_ / "a"});
  ASSERT_EQ(o.warnings.size(), 1u);
}

TEST_F(ReducerFastTest, MalformedLinesAreTheSameErrors) {
  write_sweep(dir_ / "a", "s1");
  auto lines = lines_of(dir_ / "a" / "results.jsonl");
  auto bad = lines;
  bad.insert(bad.begin() + 2, "{\"key\": \"x\", \"record\": ");
  write_lines(dir_ / "a" / "results.jsonl", bad);
  const Outcome o = same_from_both({dir_ / "a"});
  EXPECT_NE(o.report.find("results.jsonl:3: not valid JSON"), std::string::npos) << o.report;
  // A final record whose key disagrees with its task id: found in the records pass by both.
  auto wrong = lines;
  for (auto& l : wrong) {
    if (l.find("rms_norm-full") != std::string::npos && l.find("\"final/") == std::string::npos) {
      Json e = Json::parse(l);
      e["record"]["shape_id"] = "9";
      l = e.dump();
      break;
    }
  }
  write_lines(dir_ / "a" / "results.jsonl", wrong);
  const Outcome w = same_from_both({dir_ / "a"});
  EXPECT_NE(w.report.find("field \"record.task_id\"/\"record.shape_id\""), std::string::npos)
      << w.report;
}

TEST_F(ReducerFastTest, ALineLongerThanTheReadBlockIsReadWhole) {
  write_sweep(dir_ / "a", "s1");
  auto lines = lines_of(dir_ / "a" / "results.jsonl");
  for (auto& l : lines) {
    if (l.find("silu_and_mul-full") != std::string::npos && l.find("\"final/") == std::string::npos) {
      Json e = Json::parse(l);
      e["record"]["error"] = std::string(9u << 20, 'x');  // past the 8 MiB block
      l = e.dump();
      break;
    }
  }
  write_lines(dir_ / "a" / "results.jsonl", lines);
  const Outcome o = same_from_both({dir_ / "a"});
  EXPECT_FALSE(o.report.starts_with("error: ")) << o.report.substr(0, 300);
}

}  // namespace
}  // namespace atrex::scoring
