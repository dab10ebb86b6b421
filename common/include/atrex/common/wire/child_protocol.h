// The runner <-> evaluation child protocol (typed here once, like every cross-process message;
// DESIGN.md §5: the runner and its evaluation children use it): the request file the
// runner writes (atrex.child-request/1) and the response lines the child appends, one per shape
// as it completes (atrex.child-response/1). Both sides read each other strictly: a renamed field
// fails at once, naming itself. The child never sees the suite's hidden data: the request holds
// what it needs (the shape's parameters, the seeds, the timing loop, the compiled library).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "atrex/common/error.h"
#include "atrex/common/json_io.h"
#include "atrex/common/wire/eval_record.h"
#include "atrex/common/wire/eval_settings.h"

namespace atrex::runner {

// mode "dump" (`atrex problems dump`): draw a shape's inputs and write them and the reference
// outputs into `out_dir` (atrex.dump/1, docs/evaluation.md).
struct DumpItem {
  std::string operator_name;
  std::string shape_id;
  Json params = Json::object();
  Json init_kwargs = Json::object();
  Json input_kwargs = Json::object();
  uint64_t seed = 1;
  std::string backend;  // for the manifest
  std::string out_dir;
  double atol = 1e-2;
  double rtol = 5e-2;
};
// One dump item's outcome: "ok", "rejected" (bad item), "crashed" (device failure), "skipped".
struct DumpItemResult {
  std::string operator_name;
  std::string shape_id;
  std::string status;
  std::string error;
  std::string out_dir;
  double wall_s = 0;
};
struct ChildDumpResponse {
  std::string device;
  std::vector<DumpItemResult> items;
  bool crashed = false;  // an item crashed the device context; the rest were skipped
};

inline constexpr const char* kChildRequestSchema = "atrex.child-request/1";
inline constexpr const char* kChildResponseSchema = "atrex.child-response/1";
inline constexpr const char* kJudgeVerdictSchema = "atrex.judge-verdict/1";

// The performance gate's loop (EvalSettings' timing part).
struct TimingLoop {
  int warmup_iterations = 3;
  int min_iterations = 10;
  int max_iterations = 200;
  double min_time_s = 0.2;
  double max_timing_s = 3.0;
  double target_rse = 0.01;
  TimingMode timing_mode = TimingMode::kAuto;
};
TimingLoop timing_loop(const EvalSettings& s);

// One shape of a task request, in evaluation order.
struct ChildShape {
  std::string shape_id;
  Json params = Json::object();  // the shape's init_kwargs and input_kwargs, merged
  std::vector<uint64_t> seeds;   // one correctness seed each; fresh per (runner, task, shape)
  bool performance = true;       // time it after correctness
  bool range_probe = true;       // run the operator's range probe after the first seed
  // An unseen-shape check: a wrong_result ends the child after it (the task is decided).
  bool stop_task_on_failure = false;
  bool edge_cases = true;  // check the operator's edge-case input set after the first seed
};

// mode "task": the shapes of one candidate, evaluated in order by one child.
struct ChildTaskRequest {
  std::string operator_name;
  std::string library;  // the compiled candidate (a shared object)
  double atol = 1e-2;   // unless the operator sets its own
  double rtol = 5e-2;
  TimingLoop timing;
  std::vector<ChildShape> shapes;
  // Fresh per child process (response_channel.h): every response line carries it. The request
  // reaches the child on an inherited fd only, never a path or its command line.
  std::string nonce;
  // Install the seccomp filter before loading the candidate (false only with --no-sandbox).
  bool seccomp = true;
};

struct ChildDumpRequest {
  std::vector<DumpItem> items;
};

// One request file: exactly one of the two modes.
struct ChildRequest {
  std::optional<ChildTaskRequest> task;
  std::optional<ChildDumpRequest> dump;
};
Json to_json(const ChildRequest& r);
Result<ChildRequest> child_request_from_json(const Json& j, const std::string& source);

// What the child says about one shape (one JSON line of the response file).
struct ChildShapeResponse {
  std::string nonce;  // the request's
  std::string shape_id;
  EvalStatus status = EvalStatus::kCrashed;
  std::string error;
  std::string device;
  int seeds_passed = 0;
  double max_abs_error = 0;
  double max_rel_error = 0;
  std::vector<std::string> low_signal_outputs;
  std::optional<TimingSummary> timing;
  std::optional<double> dsl_share;    // CUPTI-traced timing only
  std::string dsl_attribution_error;  // why no dsl_share although traced
  Json clocks = Json::object();
  Json phases_s = Json::object();
  std::string range_probe;  // what the range probe scaled, "" when none ran
  std::string edge_case;    // the edge-case input set checked, "" when none ran
  std::optional<std::vector<std::string>> unlaunched_kernels;
  std::optional<int64_t> unlaunched_instantiations;
  std::string input_rotation;  // "on: N input sets, ...", or "off: " and why one set
  double started_at_s = 0;     // CLOCK_MONOTONIC seconds when the child began the shape
  double wall_s = 0;           // the shape's wall time inside the child
};
Json to_json(const ChildShapeResponse& r);
Result<ChildShapeResponse> child_shape_response_from_json(const Json& j, const std::string& source);

// The pings of the judge's start probe (JudgeVerdict::start_latency_us): the runner spawns the
// candidate's child once its echo thread has answered this many (or after
// kJudgeStartWaitMs, where the judge is slow to start or died).
inline constexpr int kJudgeStartPings = 15;
inline constexpr int kJudgeStartWaitMs = 10000;

// What the judge (judge.h: the same child binary with --judge, its own sandbox, no candidate
// loaded) says about one shape, on its own pipe to the runner, which the candidate's process
// cannot reach. The judge draws the seeds' inputs, runs the reference and compares the outputs
// (and the inputs, unchanged) the candidate's child publishes after each checked call
// (docs/evaluation.md "The judge").
struct JudgeVerdict {
  std::string nonce;  // the judge's own request's, never the child's
  std::string shape_id;
  // ok: every check the shape needs was made and passed; wrong_result: a check failed (error);
  // rejected: the child's checks were incomplete for the status it claimed (error says what).
  EvalStatus status = EvalStatus::kRejected;
  std::string error;
  // What the child's messages to the judge broke (a message that does not parse, an input set
  // that is not one of the shape's, a shape out of order): the whole task is tampering.
  std::string tampering;
  EvalStatus claimed = EvalStatus::kCrashed;  // the status the child said it would report
  int seeds_passed = 0;  // distinct correctness seeds of the shape checked and passed
  double max_abs_error = 0;
  double max_rel_error = 0;
  std::vector<std::string> low_signal_outputs;
  std::string range_probe;     // what the range probe scaled, "" when it was not checked
  std::string edge_case;       // the edge-case input set checked and passed, "" when none was
  int checks = 0;              // checked calls compared
  int timed_rechecks = 0;      // of those, timed calls the judge chose to re-check
  int post_timing_checks = 0;  // of those, after the timed calls
  int post_timing_sets = 0;    // distinct input sets among them
  bool timed = false;          // the child opened and closed a timed section
  // The timed calls on the judge's clock (CLOCK_MONOTONIC in the judge's process): per bracket,
  // the wall microseconds from the judge's go to the child's done, and how many timed samples
  // the child said the bracket holds (1 for an eager call, a batch for a graph replay).
  std::vector<double> bracket_us;
  std::vector<int> bracket_calls;
  // What one timed sample costs the device beyond the candidate's call, inside a bracket
  // (the cache flush and output reset where they fall inside it), measured by the judge on its
  // own device with no candidate: 0 on cpu (the flush is outside the bracket).
  double bracket_overhead_us = 0;
  // The judge's own wake-up latency at that moment (twice the median round trip of 15 pings
  // between two of its threads over a pipe, microseconds): how much of a bracket two wake-ups
  // may take on this host now. A loaded host makes it long.
  double bracket_latency_us = 0;
  // The same probe taken when the judge started, before the runner spawned the candidate's
  // child (judge_prelude: the runner waits for its pings), so that no candidate code can have
  // loaded the host: the allowance is capped by kStartLatencyFactor times it (timing_check.h).
  // 0 where it was not taken (no echo fds).
  double start_latency_us = 0;
  // Whether the brackets hold the work (ChildDevice::brackets_hold_work, the judge's backend:
  // cpu): each go named the splice of its call's inputs and each done carried the digest of the
  // call's outputs (judge_messages.h). Then only checked_brackets bound the claimed time.
  bool brackets_hold_work = false;
  // Indices into bracket_us of the brackets whose call the judge checked after it (a re-check
  // it chose, or the last timed call's outputs after timing): its inputs carried the go's
  // splice, its outputs passed and matched the digest sent with its done. Empty where the
  // brackets do not hold the work.
  std::vector<int> checked_brackets;
  // Whether the judge compared the candidate's buffers in its device arena (docs/evaluation.md
  // "The judge's device arena") rather than in copies the child published in the memfd.
  bool device_arena = false;
  // The judge failed on its own (its device, its memory, its mapping; status crashed): the
  // runner's failure, not the candidate's. The runner gives the task back (evaluate() fails with
  // kUnavailable) instead of recording the shape crashed.
  bool judge_failed = false;
};
Json to_json(const JudgeVerdict& v);
Result<JudgeVerdict> judge_verdict_from_json(const Json& j, const std::string& source);

Json to_json(const ChildDumpResponse& r);
Result<ChildDumpResponse> child_dump_response_from_json(const Json& j, const std::string& source);

}  // namespace atrex::runner
