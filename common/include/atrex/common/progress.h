// Progress of a long command (`sweep run`, `sweep wait`, `reduce`, `regress`) on stderr: on a
// terminal one line rewritten in place ("\r" ... ESC[K) at most every `redraw`; otherwise a
// plain line every `every` (logs, CI). Each line gives done/total, the share, the rate and the
// ETA (remaining / rate so far): "reduce: 412.0/1024.0 MB (40.2%), 95.1 MB/s, ETA 6 s".
// Not thread-safe: one thread updates a meter.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace atrex {

struct ProgressOptions {
  std::string what;          // "reduce", "sweep" ...: the line's prefix
  std::string unit;          // "operators"; "MB" divides the counts by 1e6 for display
  bool terminal = false;     // stderr is a terminal (progress_to_terminal())
  std::chrono::milliseconds redraw{200};    // terminal: the fastest redraw
  std::chrono::milliseconds every{10'000};  // not a terminal: one line per this
  std::function<std::chrono::steady_clock::time_point()> now;  // empty: steady_clock
  std::function<void(std::string_view)> write;                 // empty: stderr
};

class ProgressMeter {
 public:
  ProgressMeter(ProgressOptions options, int64_t total);
  ~ProgressMeter();  // finish() if not called
  ProgressMeter(const ProgressMeter&) = delete;
  ProgressMeter& operator=(const ProgressMeter&) = delete;

  void set_total(int64_t total) { total_ = total; }
  // `done` so far (absolute); `detail` is appended to the line ("3 evaluations queued").
  void update(int64_t done, std::string_view detail = {});
  // Another message while the meter runs: on a terminal the meter's line is cleared first and
  // drawn again after it.
  void print(std::string_view message);
  // The last line (always written, once), ending the terminal line with a newline.
  void finish(std::string_view detail = {});

  // The text of a line, for given figures (the unit test's view).
  static std::string line(std::string_view what, std::string_view unit, int64_t done,
                          int64_t total, double elapsed_s, std::string_view detail);

 private:
  void draw(bool force);

  ProgressOptions o_;
  int64_t total_ = 0;
  int64_t done_ = 0;
  std::string detail_;
  std::chrono::steady_clock::time_point start_, last_;
  bool drawn_ = false, finished_ = false;
};

// stderr is a terminal that takes "\r" and ESC[K (isatty, TERM neither empty nor "dumb").
bool progress_to_terminal();
// ATREX_PROGRESS_EVERY_S (seconds, > 0) when set, else `fallback`: the plain-line period.
std::chrono::milliseconds progress_every(std::chrono::milliseconds fallback);

}  // namespace atrex
