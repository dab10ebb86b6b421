// S_i and S_agg (paper §3–4, docs/architecture.md §6):
//   S_i   = median of S_j over the shapes where the operator's final candidate is correct;
//           0 when no shape passes or the operator was not attempted.
//   S_agg = Σ_i w_i · S_i over the WHOLE suite (w_i = normalised importance_score), so an
//           operator without a passing candidate contributes 0 and is listed as such.
// Correctness rate = attempted operators whose final candidate passed every evaluated shape,
// over attempted operators. Target-DSL adoption = correct operators whose candidate's mean
// DSL share is at least `dsl_threshold`, over correct operators with a measured share (null when
// nothing was measured; the CPU backend does not measure it).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "atrex/common/wire/agent_task.h"
#include "atrex/common/wire/eval_record.h"
#include "atrex/problems/suite.h"

namespace atrex::scoring {

// One evaluated shape of an operator's final candidate (the report's per-shape detail). Times in
// microseconds (the record's timing summary); `bound` is the roofline's limiting resource for
// the sweep's hardware profile ("memory", "compute", "none" when W = Q = 0, "unknown" when the
// suite has no counts for the shape).
struct ShapeDetail {
  std::string shape_id;
  std::string status;                     // atrex.eval/1 status name
  std::optional<double> time_us_median;   // absent when not timed
  std::optional<double> time_us_p25;
  std::optional<double> time_us_p75;
  int samples = 0;
  double relative_standard_error = 0;     // of the timing samples
  // The relative standard error is above the sweep's evaluation target_rse: the timing loop
  // stopped (max_iterations, max_timing_s) before the time was that precise.
  bool noisy = false;
  double t_roofline_us = 0;
  std::optional<double> s_j;              // ok records
  bool above_roofline = false;
  std::string bound = "unknown";
  std::optional<double> dsl_share;
  std::string error;                      // first 300 bytes of the record's reason
  // Baseline column (ReduceOptions::baselines[0]): the baseline's time on this shape.
  std::optional<double> baseline_time_us_median;
};

struct OperatorScore {
  std::string name;
  double weight = 0;
  bool attempted = false;  // a final evaluation exists
  int shapes_in_suite = 0;
  int shapes_evaluated = 0;
  int shapes_correct = 0;
  int shapes_above_roofline = 0;  // S_j capped: roofline or measurement suspect
  double s_i = 0;
  // 95% bootstrap interval of S_i from the timing noise (noise.h): present when every correct
  // shape kept its raw samples.
  std::optional<double> s_i_ci_low, s_i_ci_high;
  int shapes_noisy = 0;             // evaluated shapes whose time is noisy (ShapeDetail::noisy)
  std::optional<double> dsl_share;  // mean over correct shapes, when measured
  std::string candidate_sha256;
  std::string status;       // "correct", "partially correct", "incorrect", "not attempted"
  std::string first_error;  // first failing shape's status and reason
  // Ghost kernels: kernels the candidate's library defines that no traced (timed) call launched on
  // any of its evaluated shapes (records' unlaunched_kernels, intersected). A flag, not a verdict:
  // a kernel for shapes outside the evaluated ones is legitimate. Empty when none or not traced.
  std::vector<std::string> unlaunched_kernels;
  // Correctness illusion (paper §4): correct on every evaluated shape, but the measured target-DSL
  // share is under the threshold: the speed came from a vendor library, not from the agent's
  // kernel. False when the share was not measured (CPU backend).
  bool fallback = false;
  // The final candidate is a Python module (Atrex-Bench's own format, docs/python-candidates.md),
  // not native code: a Python fallback is PyTorch, a native one a vendor library.
  bool python = false;
  std::vector<ShapeDetail> shapes;  // in the final evaluation's shape order
  // Baseline columns: the first baseline's best S_i on this operator, when it has one.
  std::optional<double> baseline_s_i;
};

struct AgentScore {
  std::string agent;     // as the report names it (qualified "<agent>@<sweep>" when merged
                         // sweeps share an agent name)
  std::string sweep_id;  // the sweep its final evaluations come from
  std::string provider;  // search, openai, cli ...
  double s_agg = 0;
  int operators_attempted = 0;
  int operators_correct = 0;
  double correctness_rate = 0;
  std::optional<double> dsl_adoption_rate;
  int operators_fallback = 0;  // correct operators that are fallbacks (OperatorScore::fallback)
  std::vector<OperatorScore> operators;  // every suite operator, in suite (weight) order
  // Model tokens and cost over every (agent, operator) that ended (final markers' usage); zero
  // for providers without a model. Filled in by the reducer.
  TokenUsage usage;
};

// The agent's fallback operators as the reports list them: "rms_norm (0% DSL, Python), ..."
// (OperatorScore::fallback; "Python" where the candidate was a Python module); "" when none.
std::string fallback_operators(const AgentScore& agent);

// Median of a non-empty vector (mean of the two middle values for even sizes).
double median(std::vector<double> values);

// The per-shape detail of one record (bound left "unknown": the reducer knows the hardware).
ShapeDetail shape_detail(const EvalRecord& r);

// `target_rse` > 0 flags shapes whose relative standard error is above it (ShapeDetail::noisy).
// Scores one agent from its final evaluation records (one per evaluated shape; records of
// other agents are ignored). Records for operators absent from the suite are ignored.
// `failed` lists operators the agent attempted without producing a final evaluation (no
// correct candidate, an error), with the reason: they count as attempted and incorrect.
AgentScore score_agent(const problems::Suite& suite, const std::string& agent,
                       const std::vector<EvalRecord>& records,
                       const std::map<std::string, std::string>& failed = {},
                       double dsl_threshold = 0.9, double target_rse = 0);

}  // namespace atrex::scoring
