// ProgressMeter: the line's figures (rate, ETA), a terminal's single rewritten line, and the
// plain periodic lines otherwise, on an injected clock.
#include "atrex/common/progress.h"

#include <gtest/gtest.h>

namespace atrex {
namespace {

using namespace std::chrono_literals;

struct Fake {
  std::chrono::steady_clock::time_point t{};
  std::string out;
  ProgressOptions options(bool terminal) {
    ProgressOptions o;
    o.what = "reduce";
    o.unit = "records";
    o.terminal = terminal;
    o.redraw = 200ms;
    o.every = 10s;
    o.now = [this] { return t; };
    o.write = [this](std::string_view s) { out += s; };
    return o;
  }
};

TEST(ProgressMeter, LineGivesShareRateAndEta) {
  EXPECT_EQ(ProgressMeter::line("reduce", "records", 250, 1000, 5, ""),
            "reduce: 250/1000 records (25.0%), 50.0 records/s, ETA 15 s, 5 s elapsed");
  EXPECT_EQ(ProgressMeter::line("sweep", "operators", 1, 4, 120, "3 queued"),
            "sweep: 1/4 operators (25.0%), 0.50 operators/min, ETA 6:00 min, 2:00 min elapsed; "
            "3 queued");
  EXPECT_EQ(ProgressMeter::line("reduce", "MB", 2'000'000, 8'000'000, 2, ""),
            "reduce: 2.0/8.0 MB (25.0%), 1.0 MB/s, ETA 6 s, 2 s elapsed");
  EXPECT_EQ(ProgressMeter::line("sweep", "operators", 0, 4, 3, ""),
            "sweep: 0/4 operators (0.0%), ETA ?, 3 s elapsed");
}

TEST(ProgressMeter, TerminalRewritesOneLineAtMostEveryRedraw) {
  Fake f;
  {
    ProgressMeter m(f.options(true), 100);
    for (int i = 1; i <= 100; ++i) {
      f.t += 10ms;  // 1 s in all: at most 5 redraws, plus the final one
      m.update(i);
    }
    m.print("a warning");
    m.finish();
  }
  EXPECT_EQ(f.out.find('\n'), f.out.find("a warning") + 9) << "no newline before the message";
  EXPECT_NE(f.out.find("\r\x1b[Ka warning\n"), std::string::npos) << "the line cleared first";
  size_t redraws = 0;
  for (size_t p = f.out.find('\r'); p != std::string::npos; p = f.out.find('\r', p + 1)) ++redraws;
  EXPECT_GE(redraws, 5u);
  EXPECT_LE(redraws, 9u);
  EXPECT_EQ(f.out.back(), '\n');
  EXPECT_NE(f.out.find("100/100 records (100.0%)"), std::string::npos) << f.out;
}

TEST(ProgressMeter, PlainOutputIsOneLinePerPeriodAndAFinalLine) {
  Fake f;
  ProgressMeter m(f.options(false), 0);
  for (int i = 1; i <= 30; ++i) {
    f.t += 1s;
    m.update(i);
  }
  m.finish("done");
  EXPECT_EQ(f.out.find('\r'), std::string::npos);
  EXPECT_EQ(f.out.find("\x1b"), std::string::npos);
  size_t lines = 0;
  for (char c : f.out) lines += c == '\n';
  EXPECT_EQ(lines, 4u) << f.out;  // at 10, 20, 30 s and the final one
  EXPECT_NE(f.out.find("reduce: 30 records, 1.0 records/s, 30 s elapsed; done\n"),
            std::string::npos)
      << f.out;
}

}  // namespace
}  // namespace atrex
