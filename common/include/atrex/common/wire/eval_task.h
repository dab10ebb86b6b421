// atrex.task/1: evaluate one candidate on some shapes of one operator (DESIGN.md §4). Written
// by the agent loop and `atrex eval`, read by runners from the `eval` stream.
#pragma once

#include <string>
#include <vector>

#include "atrex/common/error.h"
#include "atrex/common/json_io.h"
#include "atrex/common/wire/backend.h"
#include "atrex/common/wire/eval_settings.h"

namespace atrex {

inline constexpr const char* kEvalTaskSchema = "atrex.task/1";

// Why a candidate is evaluated: an agent iteration's quick evaluation (few shapes and seeds),
// the final evaluation of an (agent, operator)'s best candidate, `atrex eval`, or `atrex bench`.
enum class EvalPurpose { kQuick, kFull, kManual, kBench };
const char* eval_purpose_name(EvalPurpose p);
Result<void> read_value(const JsonField& f, EvalPurpose& out);
inline void to_json(Json& j, EvalPurpose p) { j = eval_purpose_name(p); }

// What is evaluated. `source` travels inline so runners need no shared file system; records
// carry the reference without it.
struct CandidateRef {
  std::string sha256;  // of `source`, lowercase hex
  Backend backend = Backend::kCpu;
  std::string agent;      // agent name, or "manual" for `atrex eval`
  int generation = 0;     // AKA generation (sub-agent) that produced it
  int iteration = 0;      // iteration within the generation
  std::string file_name;  // for messages, e.g. "candidate.cu"
  std::string source;     // empty in records
};
// A candidate is a Python module when its file name ends in ".py" (Atrex-Bench's
// generated_kernel.py); it runs on the cpu or the cuda backend.
inline bool is_python_candidate(const CandidateRef& c) { return c.file_name.ends_with(".py"); }
// `with_source`: tasks carry the source, records do not.
Json to_json(const CandidateRef& c, bool with_source);
// `with_source`: the member "source" must be there (tasks) or absent (records).
Result<CandidateRef> candidate_ref_from_json(const JsonField& f, bool with_source);

struct EvalTask {
  std::string task_id;  // deterministic (agent loop: eval_task_id), the records' key prefix
  std::string sweep_id;
  std::string operator_name;
  std::vector<std::string> shape_ids;  // Atrex shape ids of `operator_name`
  std::string hardware;                // hardware profile name used for T_roofline
  EvalPurpose purpose = EvalPurpose::kManual;
  CandidateRef candidate;
  EvalSettings settings;
};
Json to_json(const EvalTask& t);
// Strict: every member present and known, the candidate with its source. `source` names where
// the JSON came from ("eval task 1700000000000-0") in errors (kInvalidInput).
Result<EvalTask> eval_task_from_json(const Json& j, const std::string& source);

}  // namespace atrex
