#include "openai/retry.h"

#include <time.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>

namespace atrex::agent::openai {

RetryDeps with_real_defaults(RetryDeps deps) {
  if (!deps.sleep) deps.sleep = [](std::chrono::milliseconds d) { std::this_thread::sleep_for(d); };
  if (!deps.uniform01) {
    auto rng = std::make_shared<std::mt19937_64>(std::random_device{}());
    auto mu = std::make_shared<std::mutex>();
    deps.uniform01 = [rng, mu] {
      std::lock_guard lock(*mu);
      return std::uniform_real_distribution<double>(0.0, 1.0)(*rng);
    };
  }
  if (!deps.wall_now) deps.wall_now = [] { return std::chrono::system_clock::now(); };
  return deps;
}

std::optional<std::chrono::milliseconds> parse_retry_after(
    std::string_view value, std::chrono::system_clock::time_point now) {
  std::string v(value);
  v.erase(0, v.find_first_not_of(" \t"));
  v.erase(v.find_last_not_of(" \t") + 1);
  if (v.empty()) return std::nullopt;
  if (std::all_of(v.begin(), v.end(), [](unsigned char c) { return std::isdigit(c); })) {
    if (v.size() > 9) return std::chrono::milliseconds(std::chrono::hours(24 * 365));
    return std::chrono::seconds(std::stoll(v));
  }
  // IMF-fixdate; strptime with the C locale's day and month names.
  struct tm tm {};
  const char* end = strptime(v.c_str(), "%a, %d %b %Y %H:%M:%S GMT", &tm);
  if (!end || *end != '\0') return std::nullopt;
  const auto at = std::chrono::system_clock::from_time_t(timegm(&tm));
  if (at <= now) return std::chrono::milliseconds(0);
  return std::chrono::ceil<std::chrono::milliseconds>(at - now);
}

std::chrono::milliseconds backoff_delay(const RetryPolicy& p, int retry, double uniform01) {
  const double step =
      std::min(static_cast<double>(p.cap.count()),
               static_cast<double>(p.base.count()) * std::ldexp(1.0, std::min(retry, 40)));
  const double u = std::clamp(uniform01, 0.0, 1.0);
  return std::chrono::milliseconds(static_cast<int64_t>(step / 2 + u * step / 2));
}

std::chrono::milliseconds retry_delay(const RetryPolicy& p, int retry, double uniform01,
                                      std::optional<std::chrono::milliseconds> retry_after) {
  if (retry_after) return std::min(*retry_after, p.retry_after_cap);
  return backoff_delay(p, retry, uniform01);
}

bool retryable_status(int status) { return status == 429 || status == 408 || status >= 500; }

}  // namespace atrex::agent::openai
