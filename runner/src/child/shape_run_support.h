// Helpers of the evaluation child's shape run (shape_run.h): owned device buffers, the
// verdict type, the timing summary of a response, input comparison, per-phase wall times.
#pragma once

#include <algorithm>
#include <chrono>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "atrex/common/json_io.h"
#include "atrex/common/wire/eval_record.h"
#include "atrex/common/sample_stats.h"
#include "atrex/problems/operator.h"
#include "child_device.h"

namespace atrex::runner::child {

// How the input sets beyond a shape's correctness seeds derive from them, in the child and in
// the judge alike (the judge accepts a check only on an input set of the shape's).
inline constexpr uint64_t kRangeProbeSeedMix = 0x52414e4745ull;     // seeds[0] ^ this, scaled
inline constexpr uint64_t kTimingSeedMix = 0x9E3779B97F4A7C15ull;   // seeds.back() ^ this

// Device buffers released when the child is done (or bails out).
class Buffers {
 public:
  explicit Buffers(ChildDevice& d) : dev_(d) {}
  ~Buffers() {
    for (void* p : owned_) dev_.release(p);
  }
  Result<void*> alloc(size_t bytes) {
    ATREX_ASSIGN_OR_RETURN(void* p, dev_.alloc(std::max<size_t>(bytes, 16)));
    owned_.push_back(p);
    return p;
  }

 private:
  ChildDevice& dev_;
  std::vector<void*> owned_;
};

// The verdict on a candidate that failed a gate (a bad candidate is data, not an Error).
struct Failure {
  EvalStatus status = EvalStatus::kWrongResult;
  std::string error;
};

inline TimingSummary timing_summary(const std::vector<double>& samples, const std::string& method) {
  std::vector<double> s = samples;
  std::sort(s.begin(), s.end());
  TimingSummary t;
  t.time_us_median = stats::quantile_sorted(s, 0.5);
  t.time_us_p25 = stats::quantile_sorted(s, 0.25);
  t.time_us_p75 = stats::quantile_sorted(s, 0.75);
  t.time_us_iqr = t.time_us_p75 - t.time_us_p25;
  t.time_us_min = s.empty() ? 0.0 : s.front();
  t.time_us_mean = stats::mean(s);
  t.n = static_cast<int>(s.size());
  t.samples_us = samples;
  t.method = method;
  t.relative_standard_error = stats::relative_standard_error(samples);
  return t;
}

inline std::string first_byte_difference(const problems::TensorDesc& d, const uint8_t* a,
                                         const uint8_t* b) {
  const size_t n = d.bytes();
  for (size_t i = 0; i < n; ++i) {
    if (a[i] != b[i])
      return fmt::format("{} (element {})", d.name, i / problems::dtype_size(d.dtype));
  }
  return {};
}

// Wall seconds per phase of one shape (the response's "phases_s"), to see where evaluation time
// goes: setup (load, allocate), inputs (generate + reference + host copies), candidate (checked
// calls), check (device->host copies and comparisons), timing.
class PhaseClock {
 public:
  struct Scope {
    PhaseClock& clock;
    const char* phase;
    std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
    ~Scope() {
      clock.seconds_[phase] +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
  };
  Scope scope(const char* phase) { return Scope{*this, phase}; }
  Json to_json() const { return Json(seconds_); }

 private:
  std::map<std::string, double> seconds_;
};

}  // namespace atrex::runner::child
