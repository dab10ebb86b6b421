#include "atrex/common/progress.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include <fmt/format.h>

namespace atrex {

namespace {

std::string duration_text(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const auto t = static_cast<int64_t>(std::llround(s));
  if (t < 60) return fmt::format("{} s", t);
  if (t < 3600) return fmt::format("{}:{:02} min", t / 60, t % 60);
  return fmt::format("{}:{:02}:{:02} h", t / 3600, (t / 60) % 60, t % 60);
}

}  // namespace

std::string ProgressMeter::line(std::string_view what, std::string_view unit, int64_t done,
                                int64_t total, double elapsed_s, std::string_view detail) {
  const bool mb = unit == "MB";
  auto fig = [&](double v) { return mb ? fmt::format("{:.1f}", v / 1e6) : fmt::format("{:.0f}", v); };
  std::string s = fmt::format("{}: {}", what, fig(static_cast<double>(done)));
  if (total > 0) {
    s += fmt::format("/{} {} ({:.1f}%)", fig(static_cast<double>(total)), unit,
                     100.0 * static_cast<double>(done) / static_cast<double>(total));
  } else {
    s += fmt::format(" {}", unit);
  }
  const double rate = elapsed_s > 0 ? static_cast<double>(done) / elapsed_s : 0;
  if (rate > 0) {
    s += mb ? fmt::format(", {:.1f} MB/s", rate / 1e6)
            : rate >= 1 ? fmt::format(", {:.1f} {}/s", rate, unit)
                        : fmt::format(", {:.2f} {}/min", rate * 60, unit);
    if (total > 0 && done < total) {
      s += ", ETA " + duration_text(static_cast<double>(total - done) / rate);
    }
  } else if (total > 0 && done < total) {
    s += ", ETA ?";
  }
  s += ", " + duration_text(elapsed_s) + " elapsed";
  if (!detail.empty()) s += fmt::format("; {}", detail);
  return s;
}

ProgressMeter::ProgressMeter(ProgressOptions options, int64_t total)
    : o_(std::move(options)), total_(total) {
  if (!o_.now) o_.now = [] { return std::chrono::steady_clock::now(); };
  if (!o_.write) {
    o_.write = [](std::string_view s) {
      std::fwrite(s.data(), 1, s.size(), stderr);
      std::fflush(stderr);
    };
  }
  start_ = last_ = o_.now();
}

ProgressMeter::~ProgressMeter() {
  if (!finished_) finish();
}

void ProgressMeter::draw(bool force) {
  const auto now = o_.now();
  if (!force && now - last_ < (o_.terminal ? o_.redraw : o_.every)) return;
  last_ = now;
  const std::string text =
      line(o_.what, o_.unit, done_, total_,
           std::chrono::duration<double>(now - start_).count(), detail_);
  if (o_.terminal) {
    o_.write("\r" + text + "\x1b[K");
  } else {
    o_.write(text + "\n");
  }
  drawn_ = true;
}

void ProgressMeter::update(int64_t done, std::string_view detail) {
  done_ = done;
  detail_ = detail;
  draw(false);
}

void ProgressMeter::print(std::string_view message) {
  if (o_.terminal && drawn_) o_.write("\r\x1b[K");
  o_.write(std::string(message) + "\n");
  if (o_.terminal && drawn_) draw(true);
}

void ProgressMeter::finish(std::string_view detail) {
  if (finished_) return;
  finished_ = true;
  if (!detail.empty()) detail_ = detail;
  draw(true);
  if (o_.terminal) o_.write("\n");
}

bool progress_to_terminal() {
  const char* term = std::getenv("TERM");
  return ::isatty(STDERR_FILENO) == 1 && term && *term && std::string_view(term) != "dumb";
}

std::chrono::milliseconds progress_every(std::chrono::milliseconds fallback) {
  const char* v = std::getenv("ATREX_PROGRESS_EVERY_S");
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const double s = std::strtod(v, &end);
  if (end == v || *end != '\0' || !(s > 0) || s > 86400) return fallback;
  return std::chrono::milliseconds(static_cast<int64_t>(s * 1000));
}

}  // namespace atrex
