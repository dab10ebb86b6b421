// Evaluation settings: the sweep file's `evaluation:` / `quick_evaluation:` sections and the
// `settings` of every atrex.task/1. Defaults follow the paper (§4: 5 seeds, atol 1e-2, rtol
// 5e-2) and docs/evaluation.md (timing loop, defenses).
#pragma once

#include <string_view>

#include "atrex/common/error.h"
#include "atrex/common/json_io.h"

namespace atrex {

// How GPU calls are timed (docs/evaluation.md "Timing"): `auto` = CUPTI kernel spans where
// CUPTI loads, else CUDA-graph replay when the call can be captured, else eager events.
enum class TimingMode { kAuto, kCupti, kGraph, kEager };
const char* timing_mode_name(TimingMode m);
// kInvalidInput "expected auto, cupti, graph or eager; got "<s>"".
Result<TimingMode> parse_timing_mode(std::string_view s);
Result<void> read_value(const JsonField& f, TimingMode& out);
inline void to_json(Json& j, TimingMode m) { j = timing_mode_name(m); }

// Which W/Q give T_roofline: the released Atrex-Bench roofline.json (comparable with the
// paper) or atrex's per-operator analytic formulas (`atrex roofline --audit`).
enum class RooflineSource { kReleased, kAnalytic };
const char* roofline_source_name(RooflineSource s);
Result<void> read_value(const JsonField& f, RooflineSource& out);
inline void to_json(Json& j, RooflineSource s) { j = roofline_source_name(s); }

struct EvalSettings {
  int seeds = 5;              // fresh random seeds for the correctness gate
  double atol = 1e-2;         // absolute tolerance
  double rtol = 5e-2;         // relative tolerance
  bool performance = true;    // run the performance gate after correctness
  int warmup_iterations = 3;  // untimed calls before timing
  int min_iterations = 10;    // timed calls, at least
  int max_iterations = 200;   // timed calls, at most
  double min_time_s = 0.2;    // keep timing until this much candidate time is collected
  double max_timing_s = 3.0;  // ... or until the timing loop has run this long (wall clock)
  double target_rse = 0.01;   // ... and until the relative standard error of the mean is this
  TimingMode timing_mode = TimingMode::kAuto;
  double shape_timeout_s = 120;  // wall-clock limit of one shape's child process
  double compile_timeout_s = 180;
  RooflineSource roofline = RooflineSource::kReleased;
  // Reward-hack defenses of the correctness gate (docs/evaluation.md "Checks beyond the usual
  // inputs and the hot shapes"): the range probe (one input set per shape scaled past the fp16
  // range, where the operator defines one) and the number of unseen shapes (correctness only,
  // derived from the task's shapes by changing a free dimension; 0: none). edge_cases: the
  // edge-case input set (one per shape where the operator defines one: ties at the k-th value,
  // all-zero rows, empty experts, permuted block tables; docs/evaluation.md "Edge-case inputs").
  bool range_probe = true;
  int unseen_shapes = 2;
  bool edge_cases = true;
};
Json to_json(const EvalSettings& s);

// Which members a read needs: a sweep file names only what it changes (kPartial: the others
// keep their value in `base`); a task carries all of them (kComplete: a missing one is an
// error naming it).
enum class Completeness { kPartial, kComplete };
// Reads settings from `f`, range-checking every value; unknown members are errors.
Result<EvalSettings> eval_settings_from_json(const JsonField& f, const EvalSettings& base = {},
                                             Completeness completeness = Completeness::kPartial);

}  // namespace atrex
