// atrex.eval/1: the result of one (candidate, operator, shape) (DESIGN.md §4 "Result record").
// Written by runners into the result store (key record_key(task_id, shape_id), first write
// wins), read by agent workers, the reducer and reports.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "atrex/common/error.h"
#include "atrex/common/json_io.h"
#include "atrex/common/wire/eval_task.h"
#include "atrex/common/wire/sandbox_mode.h"

namespace atrex {

inline constexpr const char* kEvalRecordSchema = "atrex.eval/1";

// Status of one evaluated shape. A bad candidate is data: it ends up in one of these.
// Where the judge read the candidate's buffers: `device_arena` (compared where the candidate
// wrote them, in device memory the judge allocated: cuda) or `memfd` (copied through the host).
enum class JudgeReads { kDeviceArena, kMemfd };
const char* judge_reads_name(JudgeReads r);

enum class EvalStatus {
  kOk,            // passed correctness on every seed (and was timed)
  kCompileError,  // the compiler rejected the source or the entry point is missing
  kWrongResult,   // an output differed from the reference, had NaN/Inf, or an input was changed
  kTimeout,       // the child ran past its time limit and was killed
  kCrashed,       // the child died (signal, sticky CUDA error, abnormal exit)
  kRejected,      // refused before running (ABI mismatch, wrong backend, policy)
};
const char* eval_status_name(EvalStatus s);
// kInvalidInput "unknown eval status "<s>"".
Result<EvalStatus> parse_eval_status(std::string_view s);
Result<void> read_value(const JsonField& f, EvalStatus& out);
inline void to_json(Json& j, EvalStatus s) { j = eval_status_name(s); }

// One kernel of the timed calls (CUPTI): its share of the calls' kernel time and whether the
// candidate's own library defines it (target-DSL attribution, DESIGN.md §5).
struct KernelShare {
  std::string name;
  double share = 0;  // in [0, 1]
  bool own = false;
};
Result<void> read_value(const JsonField& f, KernelShare& out);

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
  // "cupti_kernel_span_l2_flush", "cuda_graph_l2_flush", "cuda_events_l2_flush",
  // "steady_clock_llc_flush", ...
  std::string method;
  double relative_standard_error = 0;  // standard error of the mean / mean
  std::string graph_fallback;          // why graph replay was not used (timing mode auto)
  // CUPTI timing: the same calls' event-timed median, why the event times were used instead
  // ("" = they were not), why CUPTI was not used (timing mode auto without it).
  std::optional<double> event_time_us_median;
  std::string cupti_fallback;
  std::string cupti_unavailable;
  std::vector<KernelShare> kernels;
  // {device, correlated}: activity records CUPTI delivered, and those of timed calls
  // (diagnostics, free-form).
  Json cupti_records = Json::object();
};
Json to_json(const TimingSummary& t);
Result<void> read_value(const JsonField& f, TimingSummary& out);

// One unseen-shape check of a task (docs/evaluation.md "Unseen shapes").
struct UnseenShapeResult {
  std::string shape;          // description, e.g. "num_tokens=37 (from shape 3)"
  std::string base_shape_id;  // the hot shape it was derived from
  Json params = Json::object();
  EvalStatus status = EvalStatus::kOk;
  std::string error;
};
Json to_json(const UnseenShapeResult& u);
Result<void> read_value(const JsonField& f, UnseenShapeResult& out);

struct EvalRecord {
  std::string task_id;
  std::string sweep_id;
  std::string operator_name;
  std::string shape_id;
  CandidateRef candidate;  // serialised without the source
  std::string hardware;    // profile name
  std::string device;      // e.g. "NVIDIA H200" or the CPU model
  std::string runner;      // the runner (queue consumer) that produced it; "local" for `atrex eval`
  // How the evaluation child ran: bwrap (namespaces, read-only view, seccomp) or none
  // (--no-sandbox). docs/evaluation.md "Sandbox".
  SandboxMode sandbox = SandboxMode::kBwrap;
  // Where the judge read the candidate's buffers (JudgeReads); none where no verdict of the
  // judge came (written "", optional in older records). docs/evaluation.md "The judge's device
  // arena".
  std::optional<JudgeReads> judge_reads;
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
  Json clocks = Json::object();     // NVML samples before and after timing (free-form)
  double wall_s = 0;                // wall time spent on this shape (child process included)
  // Wall seconds per phase inside the child: setup, inputs, reference, candidate, check, timing.
  Json phases_s = Json::object();
  std::string created_at;  // UTC, ISO 8601
  // Reward-hack defenses (docs/evaluation.md). range_probe: the inputs the range probe scaled
  // and by what ("x scaled by 2^11"), "" when none ran. unseen_shapes: the task's unseen-shape
  // checks; a failed one (wrong_result, crashed, timeout) gives every shape of the task its
  // status. unlaunched_kernels: kernels the candidate's library defines that no timed call of
  // this shape launched (CUPTI traced; absent otherwise), a flag, not a verdict. edge_case:
  // the edge-case input set checked ("logits: rounded to multiples of 0.25: ...", one entry per
  // rewritten input, "; "-separated), "" when none ran (the operator has none, or it was off).
  std::string range_probe;
  std::string edge_case;
  std::vector<UnseenShapeResult> unseen_shapes;
  std::optional<std::vector<std::string>> unlaunched_kernels;
};
Json to_json(const EvalRecord& r);
// Strict (every member present and known; unlaunched_kernels may be absent). `source` names
// where it came from ("result <key>") in errors (kInvalidInput).
Result<EvalRecord> eval_record_from_json(const Json& j, const std::string& source);

// An empty record of `task` for one shape, without the candidate source; the gates fill it in.
EvalRecord new_eval_record(const EvalTask& task, const std::string& shape_id,
                           const std::string& device = "");

}  // namespace atrex
