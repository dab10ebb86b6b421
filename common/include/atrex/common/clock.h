// Injectable clock: production code reads time through Clock so tests control it.
#pragma once

#include <atomic>
#include <chrono>
#include <string>

namespace atrex {

class Clock {
 public:
  using Duration = std::chrono::nanoseconds;
  using TimePoint = std::chrono::time_point<std::chrono::steady_clock, Duration>;
  virtual ~Clock() = default;
  // Monotonic time, for leases and deadlines.
  virtual TimePoint now() const = 0;
};

// std::chrono::steady_clock.
class SteadyClock final : public Clock {
 public:
  TimePoint now() const override { return std::chrono::steady_clock::now(); }
  static const SteadyClock& instance();
};

// A clock that moves only when told (unit tests). Thread-safe.
class ManualClock final : public Clock {
 public:
  TimePoint now() const override { return TimePoint(Duration(ns_.load())); }
  void advance(Duration d) { ns_ += d.count(); }

 private:
  std::atomic<int64_t> ns_{1'000'000'000};
};

// UTC wall time as ISO 8601 with milliseconds ("2026-11-30T08:17:00.123Z"), for records.
std::string utc_timestamp_now();

}  // namespace atrex
