// Helpers of the evaluation child's shape run (shape_run.h): owned device buffers, the
// verdict type, the timing summary of a response, input comparison, per-phase wall times.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "atrex/common/json_io.h"
#include "atrex/common/wire/eval_record.h"
#include "atrex/common/sample_stats.h"
#include "atrex/problems/numeric.h"
#include "atrex/problems/operator.h"
#include "child_device.h"
#include "atrex/common/wire/judge_messages.h"
#include "protocol/shared_layout.h"

namespace atrex::runner::child {

// How the input sets beyond a shape's correctness seeds derive from them, in the child and in
// the judge alike (the judge accepts a check only on an input set of the shape's).
inline constexpr uint64_t kRangeProbeSeedMix = 0x52414e4745ull;      // seeds[0] ^ this, scaled
inline constexpr uint64_t kEdgeCaseSeedMix = 0x4544474543415345ull;  // seeds[0] ^ this, rewritten
inline constexpr uint64_t kTimingSeedMix = 0x9E3779B97F4A7C15ull;    // seeds.back() ^ this (set 1)

// Guard regions around every output buffer (ShapeRun::check_guards): this many bytes before and
// after, a multiple of every alignment a candidate may rely on (256 B for CUDA vector loads); the
// same in the judge's output arena (protocol/shared_layout.h).
inline constexpr size_t kGuardBytes = kOutputGuardBytes;
inline constexpr uint64_t kGuardSeedMix = 0x4755415244ull;  // seeds[0] ^ this: the canary

// The timed calls rotate over up to this many input sets (docs/evaluation.md "Checks around
// timing"): set 0 is the last correctness seed's, set k >= 1 a fresh draw of timing_seed(k).
inline constexpr int kMaxRotationSets = 8;
// The drain rule of the timed calls (shape_measure.cpp): a median device-wide synchronize after
// the calls' end events longer than max(kDrainFloorUs, kDrainShare x the median timed sample) is
// device work that outlived the timed window: rejected. An idle device answers in a few
// microseconds of host latency; the floor leaves room for a loaded host's scheduling.
inline constexpr double kDrainFloorUs = 20.0, kDrainShare = 0.25;
// The rotation's extra sets (inputs only) may take this many times the shape's own bytes
// (inputs + outputs), and at least kRotationFloorBytes: small shapes always get every set.
inline constexpr double kRotationBudgetFactor = 2.0;
inline constexpr size_t kRotationFloorBytes = size_t{64} << 20;

inline uint64_t timing_seed(uint64_t last_seed, int k) {
  return k == 1 ? last_seed ^ kTimingSeedMix
                : last_seed ^ num::mix64(kTimingSeedMix + static_cast<uint64_t>(k));
}

// How many input sets the timed calls rotate over for `shape` (2..kMaxRotationSets): as many as
// the budget above allows for the extra ones.
inline int rotation_sets(const problems::ResolvedShape& shape) {
  size_t in = 0, out = 0;
  for (const auto& t : shape.inputs) in += t.bytes();
  for (const auto& t : shape.outputs) out += t.bytes();
  const double budget = std::max(static_cast<double>(kRotationFloorBytes),
                                 kRotationBudgetFactor * static_cast<double>(in + out));
  const double extra = in == 0 ? kMaxRotationSets : budget / static_cast<double>(in);
  return static_cast<int>(std::clamp(1.0 + std::floor(extra), 2.0, double{kMaxRotationSets}));
}

// Which input set of a shape (SetKind, SetKey, kMaxVariant): typed with the messages that name
// them, common/wire/judge_messages.h.
using runner::kMaxVariant;
using runner::set_kind_name;
using runner::SetKey;
using runner::SetKind;

// What the edge-case set of `def` rewrites, for the record ("" when the operator has none).
inline std::string edge_case_description(const problems::OperatorDef& def) {
  std::string out;
  for (const auto& e : def.edge_cases) out += (out.empty() ? "" : "; ") + e.input + ": " + e.what;
  return out;
}

// Draws input `index` of `shape` for `key` (without its variant) into device buffer `dst`: the
// generator (scaled for the range probe), then, for the edge-case set, the host rewrite
// (apply_edge_case_cpu) with a host round trip where the buffer is device memory. The child and
// the judge draw every set with this, so both hold the same bytes.
inline Status draw_input(ChildDevice& dev, const problems::ResolvedShape& shape, size_t index,
                         const SetKey& key, void* dst) {
  const int e =
      key.kind == SetKind::kRangeProbe ? problems::range_probe_exponent(*shape.def, index) : 0;
  ATREX_TRY(e != 0 ? dev.generate_scaled(shape, index, key.seed, e, dst)
                   : dev.generate(shape, index, key.seed, dst));
  if (key.kind != SetKind::kEdgeCase) return ok();
  const std::string& name = shape.inputs[index].name;
  const auto& cases = shape.def->edge_cases;
  if (std::none_of(cases.begin(), cases.end(), [&](const auto& c) { return c.input == name; }))
    return ok();
  if (dev.host_memory()) {
    problems::apply_edge_case_cpu(shape, index, key.seed, dst);
    return ok();
  }
  ATREX_TRY(dev.synchronize());
  std::vector<uint8_t> host(shape.inputs[index].bytes());
  ATREX_TRY(dev.to_host(host.data(), dst, host.size()));
  problems::apply_edge_case_cpu(shape, index, key.seed, host.data());
  return dev.from_host(dst, host.data(), host.size());
}

// The splice of `variant` into one tensor: input `index`'s (buffer `buffer`, which may also be
// an in-place output that starts as a copy of that input: the same bytes move, so it ends as a
// copy of the spliced input). Nothing for generated inputs and those under 4 elements.
inline Status splice_input(ChildDevice& dev, const problems::ResolvedShape& shape, size_t index,
                           void* buffer, int64_t variant) {
  if (shape.def->inputs[index].generate) return ok();
  const auto n = static_cast<uint64_t>(shape.inputs[index].numel());
  if (n < 4) return ok();
  const uint64_t len = std::clamp<uint64_t>(n / 8, 1, 64);
  const uint64_t h = num::mix64(static_cast<uint64_t>(variant) * 0x100000001b3ull + index + 1);
  const uint64_t a = h % (n - 2 * len + 1);
  const uint64_t b = a + len + num::mix64(h) % (n - 2 * len - a + 1);
  const bool forward = (num::mix64(h ^ 0x5bd1e995) & 1) != 0;
  const size_t es = problems::dtype_size(shape.inputs[index].dtype);
  auto* base = static_cast<uint8_t*>(buffer);
  return dev.copy(base + (forward ? b : a) * es, base + (forward ? a : b) * es, len * es);
}

// The splice `variant` (>= 0: the timed call's number, or on cpu the value of the judge's go)
// into the inputs `in` (device buffers of `shape`, a usual draw): in every input drawn from a distribution (no structured generator: ids, tables and
// slot maps keep their invariants) with at least 4 elements, a run of L = clamp(n/8, 1, 64)
// elements is copied over another run of the same tensor at seeded, non-overlapping offsets.
// Values stay ones the distribution drew; each timed call's inputs differ from every other call's
// in a few places, so a cache keyed on any sample of the inputs returns a stale answer that the
// judge's re-checks catch, and a cache keyed on all of them never hits. Device copies only (no
// host round trip): cheap enough for every timed call, outside the timed window (on cpu inside
// the judge's bracket, right after its go: judge_messages.h).
inline Status splice_inputs(ChildDevice& dev, const problems::ResolvedShape& shape,
                            const std::vector<void*>& in, int64_t variant) {
  for (size_t i = 0; i < shape.inputs.size(); ++i)
    ATREX_TRY(splice_input(dev, shape, i, in[i], variant));
  return ok();
}

// The window splice, where the brackets hold the work (ChildDevice::brackets_hold_work: cpu;
// docs/evaluation.md "The judge"): the child holds such an input twice in a row (x|x) and the
// candidate's pointer for a timed call is x + k, k named by the judge's go: the whole tensor
// rotated by k elements, at no cost inside the bracket and with the cache as the flush left it.
// k is a multiple of kWindowAlignBytes (the buffers' alignment is kept) and never 0, so nearly
// every row of every such input changes from call to call: a cached answer plus a patch of what
// moved is a full pass (attack round 3 patched the <= 64 elements splice_input moves, 12x faster
// than honest), and answers precomputed for every (set, offset) pair are out of reach. An input
// is window-spliced when it is drawn from a distribution (no structured generator), is no
// in-place output's source (those keep splice_input, applied to the output too) and holds at
// least two alignment steps.
inline constexpr size_t kWindowAlignBytes = 64;
inline bool window_spliced(const problems::ResolvedShape& shape, size_t index) {
  const auto& def = shape.def->inputs[index];
  if (def.generate) return false;
  for (const auto& o : shape.def->outputs) {
    if (o.initial_from == def.name) return false;
  }
  const size_t es = problems::dtype_size(shape.inputs[index].dtype);
  return es > 0 && kWindowAlignBytes % es == 0 && shape.inputs[index].bytes() >= 2 * kWindowAlignBytes;
}
// The window's offset for `variant`, in elements: a multiple of kWindowAlignBytes / element size
// in [1 step, numel).
inline uint64_t window_offset(const problems::ResolvedShape& shape, size_t index, int64_t variant) {
  const uint64_t step = kWindowAlignBytes / problems::dtype_size(shape.inputs[index].dtype);
  const uint64_t steps = static_cast<uint64_t>(shape.inputs[index].numel()) / step;
  const uint64_t h = num::mix64(static_cast<uint64_t>(variant) * 0x9e3779b97f4a7c15ull + index + 7);
  return (1 + h % std::max<uint64_t>(1, steps - 1)) * step;
}

// The splice `variant` as the judge applies it to a freshly drawn set `in` (device buffers of
// `shape`): where `window` (the backend's brackets hold the work), the window-spliced inputs
// rotated in place by their window_offset (host memory only: the cpu backend) and the others
// spliced by splice_input; elsewhere splice_inputs.
inline Status apply_splice(ChildDevice& dev, const problems::ResolvedShape& shape,
                           const std::vector<void*>& in, int64_t variant, bool window) {
  if (!window) return splice_inputs(dev, shape, in, variant);
  for (size_t i = 0; i < shape.inputs.size(); ++i) {
    if (!window_spliced(shape, i)) {
      ATREX_TRY(splice_input(dev, shape, i, in[i], variant));
      continue;
    }
    if (!dev.host_memory())
      return internal_error("a window splice on a backend whose buffers are not host memory");
    const size_t es = problems::dtype_size(shape.inputs[i].dtype);
    auto* base = static_cast<uint8_t*>(in[i]);
    std::rotate(base, base + window_offset(shape, i, variant) * es, base + shape.inputs[i].bytes());
  }
  return ok();
}

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
