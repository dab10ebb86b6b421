// The HTML report in a real browser (Debian `chromium`, headless): its plots are laid out, its
// script runs without errors and sorts the per-shape table. The page reports both in its DOM
// (render.h: data-script-errors on <html>, data-points-drawn and data-ready on <body>), read
// back with `chromium --dump-dom`. Skips without chromium unless ATREX_REQUIRE_CHROMIUM=1
// (.ci/run sets it).
#include <cstdlib>
#include <fstream>
#include <regex>

#include <gtest/gtest.h>

#include "atrex/common/process/subprocess.h"
#include "atrex/scoring/reducer.h"
#include "atrex/scoring/render.h"
#include "fixture_writer.h"

namespace atrex::scoring {
namespace {
namespace fs = std::filesystem;
using testing::FixtureSweep;

std::string chromium_binary() {
  for (const char* p : {"/usr/bin/chromium", "/usr/bin/chromium-browser"}) {
    if (fs::exists(p)) return p;
  }
  return "";
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

std::string attr(const std::string& dom, const std::string& name) {
  std::smatch m;
  if (std::regex_search(dom, m, std::regex(name + "=\"([^\"]*)\""))) return m[1];
  return "";
}

class HtmlInChromium : public ::testing::Test {
 protected:
  void SetUp() override {
    chromium_ = chromium_binary();
    if (chromium_.empty()) {
      const char* req = std::getenv("ATREX_REQUIRE_CHROMIUM");
      if (req && std::string(req) == "1") FAIL() << "ATREX_REQUIRE_CHROMIUM=1 but no chromium";
      GTEST_SKIP() << "no chromium (apt-get install chromium); ATREX_REQUIRE_CHROMIUM=1 fails";
    }
    dir_ = fs::temp_directory_path() /
           ("atrex_chromium_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    auto s = problems::Suite::load(ATREX_TEST_SUITE_DIR);
    ASSERT_TRUE(s);
    suite_ = std::make_unique<problems::Suite>(std::move(*s));
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  Report fixture_report() {
    FixtureSweep f(*suite_, "s1", "chromium", {"search", "llm"}, {"rms_norm", "silu_and_mul"});
    f.evaluated("search", "rms_norm", {{"0", 50}, {"1", 60}, {"2", 80}});
    f.evaluated("search", "silu_and_mul", {{"0", 40}});
    f.evaluated("llm", "rms_norm", {{"0", 20}, {"1", 90}, {"2", 30}});
    f.write(dir_ / "results");
    Reducer r(*suite_);
    EXPECT_TRUE(r.add_folder(dir_ / "results"));
    return *r.finish("now");
  }

  // `chromium --headless --dump-dom` of `page` (a profile of its own, no network needed).
  std::string dump_dom(const fs::path& page, const std::vector<std::string>& extra = {}) {
    SubprocessOptions o;
    o.argv = {chromium_, "--headless", "--no-sandbox", "--disable-gpu",
              "--no-first-run", "--user-data-dir=" + (dir_ / "profile").string(),
              "--virtual-time-budget=5000"};
    o.argv.insert(o.argv.end(), extra.begin(), extra.end());
    o.argv.push_back("--dump-dom");
    o.argv.push_back("file://" + page.string());
    o.timeout = std::chrono::seconds(90);
    o.output_tail_bytes = 8 << 20;
    auto r = run_subprocess(o);
    EXPECT_TRUE(r && r->ok()) << (r ? r->describe() + "\n" + r->output_tail : r.error().message);
    return r ? r->output_tail : "";
  }

  std::string chromium_;
  fs::path dir_;
  std::unique_ptr<problems::Suite> suite_;
};

TEST_F(HtmlInChromium, PlotsAreDrawnAndTheScriptRunsWithoutErrors) {
  const fs::path page = dir_ / "report.html";
  std::ofstream(page) << render_html(fixture_report());
  const std::string dom = dump_dom(page);
  EXPECT_EQ(attr(dom, "data-ready"), "yes") << dom.substr(0, 2000);
  EXPECT_EQ(attr(dom, "data-script-errors"), "") << attr(dom, "data-last-error");
  // 7 roofline points + 3 weight-vs-S_i points + 2 S_agg bars, each with a laid-out box.
  EXPECT_EQ(attr(dom, "data-points-drawn"), "12") << dom.substr(0, 2000);
}

TEST_F(HtmlInChromium, TheErrorProbeCatchesABrokenScript) {
  // The probe above is only worth something if it fails a page whose script throws.
  std::string html = render_html(fixture_report());
  html.insert(html.find("<script>", html.find("</table>")), "<script>noSuchFunction();</script>");
  const fs::path page = dir_ / "broken.html";
  std::ofstream(page) << html;
  const std::string dom = dump_dom(page);
  EXPECT_EQ(attr(dom, "data-script-errors"), "1") << dom.substr(0, 2000);
  EXPECT_NE(attr(dom, "data-last-error").find("noSuchFunction"), std::string::npos);
}

TEST_F(HtmlInChromium, ClickingAHeaderSortsThePerShapeTable) {
  std::string html = render_html(fixture_report());
  // Click "time µs" (6th column) once: ascending; record the first column-6 value of each row.
  html.insert(html.rfind("</body>"),
              "<script>var t=document.getElementById('shape-table');"
              "t.tHead.rows[0].cells[5].click();"
              "document.body.dataset.sorted=Array.prototype.map.call(t.tBodies[0].rows,"
              "function(r){return r.cells[5].dataset.v;}).join(',');</script>");
  const fs::path page = dir_ / "sorted.html";
  std::ofstream(page) << html;
  const std::string dom = dump_dom(page);
  ASSERT_EQ(attr(dom, "data-script-errors"), "") << attr(dom, "data-last-error");
  std::vector<double> times;
  std::stringstream ss(attr(dom, "data-sorted"));
  for (std::string v; std::getline(ss, v, ',');) times.push_back(std::stod(v));
  ASSERT_EQ(times.size(), 7u) << attr(dom, "data-sorted");
  EXPECT_TRUE(std::is_sorted(times.begin(), times.end())) << attr(dom, "data-sorted");
  EXPECT_LT(times.front(), 25);  // llm's 20 µs shape first
}

TEST_F(HtmlInChromium, AScreenshotIsAPng) {
  const fs::path page = dir_ / "report.html";
  std::ofstream(page) << render_html(fixture_report());
  SubprocessOptions o;
  o.argv = {chromium_, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--user-data-dir=" + (dir_ / "profile").string(), "--hide-scrollbars",
            "--window-size=1300,1800", "--screenshot=" + (dir_ / "shot.png").string(),
            "file://" + page.string()};
  o.timeout = std::chrono::seconds(90);
  auto r = run_subprocess(o);
  ASSERT_TRUE(r && r->ok()) << (r ? r->describe() + r->output_tail : r.error().message);
  const std::string png = read_file(dir_ / "shot.png");
  ASSERT_GT(png.size(), 20000u);
  EXPECT_EQ(png.substr(1, 3), "PNG");
}

}  // namespace
}  // namespace atrex::scoring
