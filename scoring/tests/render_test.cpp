// The HTML and JUnit renderings of a report reduced from a fixture folder.
#include <regex>

#include <gtest/gtest.h>

#include "atrex/scoring/reducer.h"
#include "atrex/scoring/render.h"
#include "fixture_writer.h"

namespace atrex::scoring {
namespace {
namespace fs = std::filesystem;
using testing::FixtureSweep;

size_t count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t p = text.find(needle); p != std::string::npos; p = text.find(needle, p + 1)) ++n;
  return n;
}

class RenderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = problems::Suite::load(ATREX_TEST_SUITE_DIR);
    ASSERT_TRUE(s);
    suite_ = std::make_unique<problems::Suite>(std::move(*s));
    dir_ = fs::temp_directory_path() / ("atrex_render_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    FixtureSweep f(*suite_, "s1", "render <fixture>", {"search", "llm"},
                   {"rms_norm", "block_scaled_mm", "l2_norm"});
    f.evaluated("search", "rms_norm", {{"0", 50}, {"1", 60}});
    f.evaluated("search", "block_scaled_mm", {{"0", 900}, {"1", 2000}, {"2", 0, EvalStatus::kCrashed}});
    f.failed("search", "l2_norm", "no <luck> & no \"kernel\"");
    f.evaluated("llm", "rms_norm", {{"0", 20}, {"1", 30}});
    f.write(dir_);
    Reducer r(*suite_);
    ASSERT_TRUE(r.add_folder(dir_));
    auto rep = r.finish("now");
    ASSERT_TRUE(rep);
    report_ = *rep;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::unique_ptr<problems::Suite> suite_;
  fs::path dir_;
  Report report_;
};

TEST_F(RenderTest, HtmlHasARooflinePlotPerTimedOperatorWithOnePointPerTimedShape) {
  const std::string html = render_html(report_);
  EXPECT_EQ(count(html, "<svg class=\"plot roofline\""), 2u);  // rms_norm, block_scaled_mm
  EXPECT_EQ(count(html, "<circle class=\"pt memory\"") + count(html, "<rect class=\"pt compute\""),
            6u);
  // The bound each point is drawn with is the reducer's.
  size_t compute = 0;
  for (const auto& a : report_.agents)
    for (const auto& o : a.operators)
      for (const auto& d : o.shapes) compute += d.bound == "compute" && d.time_us_median;
  EXPECT_GT(compute, 0u);
  EXPECT_EQ(count(html, "<rect class=\"pt compute\""), compute);
  EXPECT_EQ(count(html, "class=\"bar\""), 2u);  // S_agg per agent
  EXPECT_EQ(count(html, "<svg class=\"plot weight-si\""), 1u);
  EXPECT_NE(html.find("id=\"illusion\""), std::string::npos);
  EXPECT_NE(html.find("id=\"shape-table\""), std::string::npos);
  // Self-contained: nothing is fetched.
  EXPECT_EQ(html.find("http://"), html.find("http://www.w3.org/2000/svg"));
  EXPECT_EQ(html.find("https://"), std::string::npos);
  EXPECT_EQ(html.find("<script src"), std::string::npos);
  EXPECT_EQ(html.find("<link"), std::string::npos);
  // Free text is escaped.
  EXPECT_NE(html.find("render &lt;fixture&gt;"), std::string::npos);
  EXPECT_EQ(html.find("<fixture>"), std::string::npos);
}

TEST_F(RenderTest, JunitHasOneCasePerAgentAndOperatorFailingWithoutACorrectCandidate) {
  const std::string xml = render_junit(report_);
  EXPECT_EQ(count(xml, "<testcase "), 2u * suite_->operators().size());
  EXPECT_EQ(count(xml, "<failure "), 1u);  // search / l2_norm
  EXPECT_NE(xml.find("name=\"l2_norm\" time=\"0\"><properties>"), std::string::npos);
  EXPECT_NE(xml.find("no &lt;luck&gt; &amp; no &quot;kernel&quot;"), std::string::npos);
  EXPECT_NE(xml.find("<testsuites name=\"atrex render &lt;fixture&gt;\" tests=\"60\" "
                     "failures=\"1\" errors=\"0\" skipped=\"56\">"),
            std::string::npos)
      << xml.substr(0, 300);
}

TEST_F(RenderTest, JunitFailsAnOperatorThatFellBelowItsBaseline) {
  Report better = report_;
  for (auto& a : better.agents)
    for (auto& o : a.operators) o.s_i *= 2;
  apply_baseline(report_, better, "last night", "/nights/mon");
  const std::string xml = render_junit(report_);
  EXPECT_EQ(count(xml, "type=\"regression\""), 3u);  // the three correct (agent, operator)s
}

}  // namespace
}  // namespace atrex::scoring
