#include "atrex/common/wire/final_marker.h"

#include "atrex/common/wire/reader.h"

namespace atrex {

const char* final_status_name(FinalStatus s) {
  switch (s) {
    case FinalStatus::kEvaluated: return "evaluated";
    case FinalStatus::kNoCorrectCandidate: return "no_correct_candidate";
    case FinalStatus::kError: return "error";
  }
  ATREX_UNREACHABLE("FinalStatus");
}

Result<void> read_value(const JsonField& f, FinalStatus& out) {
  return read_enum(f, out,
                   {FinalStatus::kEvaluated, FinalStatus::kNoCorrectCandidate, FinalStatus::kError},
                   final_status_name, "evaluated, no_correct_candidate or error");
}

Json to_json(const FinalMarker& m) {
  return Json{{"schema", kFinalSchema},
              {"agent", m.agent},
              {"operator", m.op},
              {"status", final_status_name(m.status)},
              {"error", m.error},
              {"generations", m.generations},
              {"iterations_used", m.iterations_used},
              {"quick_score", m.quick_score},
              {"provenance", m.provenance},
              {"task_id", m.task_id},
              {"shapes", m.shapes},
              {"usage", to_json(m.usage)}};
}

Result<FinalMarker> final_marker_from_json(const Json& j, const std::string& source) {
  FinalMarker m;
  ATREX_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::open(JsonField(j, source)));
  ATREX_TRY(r.schema(kFinalSchema));
  ATREX_TRY(r.required("agent", m.agent));
  ATREX_TRY(r.required("operator", m.op));
  ATREX_TRY(r.required("status", m.status));
  ATREX_TRY(r.required("error", m.error));
  ATREX_TRY(r.required("generations", m.generations));
  ATREX_TRY(r.required("iterations_used", m.iterations_used));
  ATREX_TRY(r.required("quick_score", m.quick_score));
  ATREX_TRY(r.required("provenance", m.provenance));
  ATREX_TRY(r.required("task_id", m.task_id));
  ATREX_TRY(r.required("shapes", m.shapes));
  ATREX_TRY(r.optional("usage", m.usage));
  ATREX_TRY(r.finish());
  if (m.status == FinalStatus::kEvaluated && m.task_id.empty()) {
    return r.field().fail("an evaluated final marker needs the task_id of its evaluation");
  }
  return m;
}

}  // namespace atrex
