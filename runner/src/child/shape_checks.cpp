// ShapeRun (shape_run.h): checked calls. Outputs are poisoned before the call; after it the
// candidate's outputs (with its inputs on the shape's first check and the first after timing)
// go to the judge (judge_link.h), which holds the reference of the input set and says whether
// the inputs are unchanged and the outputs within tolerance.
// This process never sees a reference output.
#include "shape_run.h"

#include <cstring>
#include <utility>

#include <fmt/format.h>

namespace atrex::runner::child {

std::optional<Failure> ShapeRun::call_and_check(ChildShapeResponse& resp, double atol, double rtol,
                                                const std::string& context,
                                                const std::function<int()>& invoke) {
  for (size_t i = 0; i < out_.size(); ++i) {
    if (auto f = device_error(initialise_output(i, out_[i]), "poisoning outputs")) return f;
  }
  if (auto f = device_error(dev_.synchronize(), "poisoning outputs")) return f;
  int rc = 0;
  {
    auto p = phases_.scope("candidate");
    rc = invoke ? invoke() : entry_(launch_->launch());
    if (auto f = device_error(dev_.synchronize(), "after the candidate call")) return f;
  }
  if (auto f = check_guards(context.empty()
                                ? "a checked call"
                                : "the checked call of " + context.substr(0, context.rfind(':'))))
    return f;
  if (rc != 0) return Failure{EvalStatus::kWrongResult, returned_error(rc)};
  return check_outputs(resp, atol, rtol, context);
}

Status ShapeRun::fill_guards() {
  guard_canary_host_.resize(kGuardBytes);
  const uint64_t seed = num::mix64(item_.seeds.front() ^ kGuardSeedMix);
  for (size_t i = 0; i < kGuardBytes; i += 8) {
    const uint64_t w = num::mix64(seed + i);
    std::memcpy(guard_canary_host_.data() + i, &w, std::min<size_t>(8, kGuardBytes - i));
  }
  ATREX_TRY(dev_.from_host(guard_canary_, guard_canary_host_.data(), kGuardBytes));
  for (const auto& [before, after] : guards_) {
    ATREX_TRY(dev_.copy(before, guard_canary_, kGuardBytes));
    ATREX_TRY(dev_.copy(after, guard_canary_, kGuardBytes));
  }
  return dev_.synchronize();
}

// The first byte of `guard` that differs from the canary (-1: none): on the device where the
// backend compares there, else on a host copy (host memory: in place).
static Status first_guard_difference(ChildDevice& dev, const void* guard, const void* canary,
                                     const std::vector<uint8_t>& canary_host,
                                     std::vector<uint8_t>& scratch, int64_t& first) {
  bool on_device = false;
  first = -1;
  ATREX_TRY(dev.first_difference(guard, canary, kGuardBytes, first, on_device));
  if (on_device) return ok();
  const uint8_t* bytes = static_cast<const uint8_t*>(guard);
  if (!dev.host_memory()) {
    scratch.resize(kGuardBytes);
    ATREX_TRY(dev.to_host(scratch.data(), guard, kGuardBytes));
    bytes = scratch.data();
  }
  if (std::memcmp(bytes, canary_host.data(), kGuardBytes) == 0) return ok();
  for (size_t i = 0; i < kGuardBytes; ++i) {
    if (bytes[i] != canary_host[i]) {
      first = static_cast<int64_t>(i);
      break;
    }
  }
  return ok();
}

std::optional<Failure> ShapeRun::check_guards(const std::string& when) {
  for (size_t o = 0; o < guards_.size(); ++o) {
    const size_t es = problems::dtype_size(shape_.outputs[o].dtype);
    for (int side = 0; side < 2; ++side) {
      const void* guard = side == 0 ? guards_[o].first : guards_[o].second;
      int64_t first = -1;
      if (auto f = device_error(first_guard_difference(dev_, guard, guard_canary_,
                                                       guard_canary_host_, guard_scratch_, first),
                                "checking the guard regions"))
        return f;
      if (first < 0) continue;
      // Before the start: the changed byte farthest from the output (the guard's first
      // difference); past the end: the one nearest to it.
      const std::string where =
          side == 0 ? fmt::format(
                          "before the start of output {} ({} bytes before it, element "
                          "-{})",
                          shape_.outputs[o].name, kGuardBytes - static_cast<size_t>(first),
                          (kGuardBytes - static_cast<size_t>(first) + es - 1) / es)
                    : fmt::format(
                          "past the end of output {} (byte {} after it, element {} "
                          "past its last)",
                          shape_.outputs[o].name, first, static_cast<size_t>(first) / es + 1);
      return Failure{EvalStatus::kRejected,
                     fmt::format("the candidate wrote {} in {}: out-of-bounds write (the {} "
                                 "guard bytes on each side of every output must stay unchanged)",
                                 where, when, kGuardBytes)};
    }
  }
  return std::nullopt;
}

// The judge compares (tolerances are the judge's: the operator's or the task's, from its own
// request); the error figures, low-signal outputs and seeds of the record are the judge's too.
std::optional<Failure> ShapeRun::check_outputs(ChildShapeResponse& resp, double atol, double rtol,
                                               const std::string& context) {
  (void)resp, (void)atol, (void)rtol;
  auto phase = phases_.scope("check");
  // The inputs go ahead of the outputs where the judge needs them (the shape's first check,
  // the first after timing, a timed call it re-checks: judge.cpp inputs_due_); at any other
  // check it may ask for them after the call, and they follow the outputs.
  const bool inputs = std::exchange(inputs_due_, false);
  std::vector<std::pair<const void*, size_t>> published, in;
  size_t out_bytes = 0;
  for (size_t i = 0; i < shape_.inputs.size(); ++i)
    in.emplace_back(work_in_[i], shape_.inputs[i].bytes());
  if (inputs) published = in;
  for (size_t i = 0; i < shape_.outputs.size(); ++i) {
    published.emplace_back(out_[i], shape_.outputs[i].bytes());
    out_bytes += shape_.outputs[i].bytes();
  }
  if (auto f = device_error(judge_.publish(dev_, published), "publishing outputs to the judge"))
    return f;
  auto verdict = judge_.check(item_.shape_id, key_, context, inputs,
                              [&] { return judge_.publish(dev_, in, out_bytes); });
  if (!verdict) return Failure{EvalStatus::kCrashed, "judge: " + verdict.error().message};
  if (!verdict->empty()) return Failure{EvalStatus::kWrongResult, *verdict};
  return std::nullopt;
}

}  // namespace atrex::runner::child
