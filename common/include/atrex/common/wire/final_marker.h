// atrex.final/1: how an (agent, operator) ended (DESIGN.md §7), stored in the result store
// under final_key(agent, operator) by the agent worker that ran its last generation, or by the
// scheduler for an agent task that was dead-lettered. A sweep is done when every (agent,
// operator) has one; the reducer scores the final evaluation's records it points to.
#pragma once

#include <string>
#include <vector>

#include "atrex/common/error.h"
#include "atrex/common/json_io.h"
#include "atrex/common/wire/agent_task.h"

namespace atrex {

inline constexpr const char* kFinalSchema = "atrex.final/1";

enum class FinalStatus {
  kEvaluated,           // the best candidate got its full evaluation (task_id, shapes)
  kNoCorrectCandidate,  // the budget ran out without a correct candidate
  kError,               // the (agent, operator) could not run (no templates, dead-lettered ...)
};
const char* final_status_name(FinalStatus s);
Result<void> read_value(const JsonField& f, FinalStatus& out);
inline void to_json(Json& j, FinalStatus s) { j = final_status_name(s); }

struct FinalMarker {
  std::string agent;
  std::string op;
  FinalStatus status = FinalStatus::kError;
  std::string error;                 // why, when status != evaluated
  int generations = 0;               // generations run
  int iterations_used = 0;           // candidates evaluated
  double quick_score = -1;           // the best candidate's quick objective; -1: none correct
  Json provenance = Json::object();  // the best candidate's, as its provider gave it
  std::string task_id;               // of the final evaluation (status evaluated)
  std::vector<std::string> shapes;   // of the final evaluation
  TokenUsage usage;  // model tokens and cost over all generations (optional member; absent = none)
};
Json to_json(const FinalMarker& m);
Result<FinalMarker> final_marker_from_json(const Json& j, const std::string& source);

}  // namespace atrex
