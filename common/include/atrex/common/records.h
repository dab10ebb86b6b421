// Versioned messages that cross process boundaries (docs/architecture.md §4):
//   atrex.task/1   EvalTask   — evaluate one candidate on shapes of one operator
//   atrex.eval/1   EvalRecord — the result of one (candidate, operator, shape)
// JSON field names are the contract; the structs are conveniences around them.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "atrex/common/error.h"
#include "atrex/common/json_io.h"

namespace atrex {

inline constexpr const char* kEvalTaskSchema = "atrex.task/1";
inline constexpr const char* kEvalRecordSchema = "atrex.eval/1";

// Status of one evaluated shape. A bad candidate is data: it ends up in one of these.
enum class EvalStatus {
  kOk,            // passed correctness on every seed (and was timed)
  kCompileError,  // the compiler rejected the source or the entry point is missing
  kWrongResult,   // an output differed from the reference, had NaN/Inf, or an input was changed
  kTimeout,       // the child ran past its time limit and was killed
  kCrashed,       // the child died (signal, sticky CUDA error, abnormal exit)
  kRejected,      // refused before running (ABI mismatch, wrong backend, policy)
};
const char* eval_status_name(EvalStatus s);
Result<EvalStatus> parse_eval_status(std::string_view s);

// What is being evaluated. `source` travels inline so runners need no shared filesystem.
struct CandidateRef {
  std::string sha256;     // of `source`
  std::string backend;    // "cpu" | "cuda" | "hip"
  std::string agent;      // agent name, or "manual" for `atrex eval`
  int generation = 0;     // AKA generation (sub-agent) that produced it
  int iteration = 0;      // iteration within the generation
  std::string file_name;  // for messages, e.g. "candidate.cu"
  std::string source;
};

// Evaluation settings (sweep file `evaluation:`; defaults follow the paper, docs/architecture.md
// §5).
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
  double target_rse = 0.01;   // ... and until the relative standard error of the mean is this small
  // GPU timing: "auto" (CUDA-graph replay when the call can be captured, else eager events),
  // "graph" (capture required) or "eager" (events around each call). docs/evaluation.md.
  std::string timing_mode = "auto";
  double shape_timeout_s = 120;  // wall-clock limit of one shape's child process
  double compile_timeout_s = 180;
  // Which W/Q give T_roofline: "released" (Atrex-Bench roofline.json, comparable with the
  // paper) or "analytic" (atrex's per-operator formulas; `atrex roofline --audit`).
  std::string roofline = "released";
  // Reward-hack defenses of the correctness gate (docs/evaluation.md "Checks beyond the usual
  // inputs and the hot shapes"):
  // the range probe (one input set per shape scaled past the fp16 range, where the operator
  // defines one) and the number of unseen shapes (correctness only, derived from the task's
  // shapes by changing a free dimension; 0: none) checked before the task's shapes.
  bool range_probe = true;
  int unseen_shapes = 2;
};
Json to_json(const EvalSettings& s);
// Reads settings from `f`; fields it does not name keep their value in `base`.
Result<EvalSettings> eval_settings_from_json(const JsonField& f, const EvalSettings& base = {});

struct EvalTask {
  std::string task_id;
  std::string sweep_id;
  std::string operator_name;
  std::vector<std::string> shape_ids;
  std::string hardware;  // hardware profile name used for T_roofline
  std::string purpose;   // "quick" (agent iteration), "full" (final), "manual"
  CandidateRef candidate;
  EvalSettings settings;
};
Json to_json(const EvalTask& t);
Result<EvalTask> eval_task_from_json(const Json& j, const std::string& source);

// Per-shape timing summary. Times in microseconds; samples kept raw.
struct TimingSummary {
  double time_us_median = 0;
  double time_us_p25 = 0;
  double time_us_p75 = 0;
  double time_us_iqr = 0;
  double time_us_min = 0;
  double time_us_mean = 0;
  int n = 0;
  std::vector<double> samples_us;
  std::string method;  // "cuda_graph_l2_flush", "cuda_events_l2_flush", "steady_clock_llc_flush"
  double relative_standard_error = 0;  // standard error of the mean / mean
  std::string graph_fallback;          // why graph replay was not used (timing_mode auto), else ""
  // CUPTI timing ("cupti_kernel_span_l2_flush"): the same calls' event-timed median, why the
  // event times were used instead ("" = they were not), and the kernels of the timed calls
  // ([{name, share of kernel time, own: defined by the candidate}]).
  std::optional<double> event_time_us_median;
  std::string cupti_fallback;
  std::string cupti_unavailable;  // timing_mode auto without CUPTI: why
  Json kernels = Json::array();
  Json cupti_records =
      Json::object();  // {device, correlated}: records CUPTI delivered, and of timed calls
};

Json to_json(const TimingSummary& t);
TimingSummary timing_summary_from_json(const Json& j);

struct EvalRecord {
  std::string task_id;
  std::string sweep_id;
  std::string operator_name;
  std::string shape_id;
  CandidateRef candidate;  // serialised without the source
  std::string hardware;    // profile name
  std::string device;      // e.g. "NVIDIA H200" or the CPU model
  std::string
      runner;  // the runner (queue consumer name) that produced it; "local" for `atrex eval`
  EvalStatus status = EvalStatus::kCrashed;
  std::string error;  // reason when status != ok
  double max_abs_error = 0;
  double max_rel_error = 0;
  std::vector<std::string> low_signal_outputs;  // outputs judged relative to their magnitude
  int seeds_passed = 0;
  std::optional<TimingSummary> timing;
  double t_roofline_us = 0;
  std::optional<double> s_j;        // min(1, T_roofline / T_cand) for ok records
  bool above_roofline = false;      // T_cand < T_roofline: roofline or measurement is wrong
  std::optional<double> dsl_share;  // target-DSL share of GPU time (CUPTI), when measured
  Json clocks = Json::object();     // {"sm_mhz": ..., "mem_mhz": ...} when known
  double wall_s = 0;                // wall time spent on this shape (child process included)
  // Wall seconds per phase inside the child: setup, inputs, candidate, check, timing.
  Json phases_s = Json::object();
  std::string created_at;
  // Reward-hack defenses (docs/evaluation.md). range_probe: the inputs the range probe scaled
  // and by what ("x scaled by 2^11"), "" when none ran. unseen_shapes: the task's unseen-shape
  // checks, [{shape, base_shape_id, params, status, error}]; a failed one (wrong_result,
  // crashed, timeout) gives every shape of the task its status. unlaunched_kernels: kernels the
  // candidate's library defines that no timed call of this shape launched (CUPTI traced; absent
  // otherwise), a flag, not a verdict.
  std::string range_probe;
  Json unseen_shapes = Json::array();
  std::optional<std::vector<std::string>> unlaunched_kernels;
};
Json to_json(const EvalRecord& r);
Result<EvalRecord> eval_record_from_json(const Json& j, const std::string& source);

// An empty record of `task` for one shape, without the candidate source; the gates fill it in.
EvalRecord new_eval_record(const EvalTask& task, const std::string& shape_id,
                           const std::string& device = "");

// Key under which a shape's record is stored: "<task_id>/<shape_id>".
std::string record_key(const std::string& task_id, const std::string& shape_id);

}  // namespace atrex
