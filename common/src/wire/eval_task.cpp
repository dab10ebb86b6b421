#include "atrex/common/wire/eval_task.h"

#include "atrex/common/wire/reader.h"

namespace atrex {

const char* eval_purpose_name(EvalPurpose p) {
  switch (p) {
    case EvalPurpose::kQuick: return "quick";
    case EvalPurpose::kFull: return "full";
    case EvalPurpose::kManual: return "manual";
    case EvalPurpose::kBench: return "bench";
  }
  ATREX_UNREACHABLE("EvalPurpose");
}

Result<void> read_value(const JsonField& f, EvalPurpose& out) {
  return read_enum(
      f, out, {EvalPurpose::kQuick, EvalPurpose::kFull, EvalPurpose::kManual, EvalPurpose::kBench},
      eval_purpose_name, "quick, full, manual or bench");
}

Json to_json(const CandidateRef& c, bool with_source) {
  Json j{{"sha256", c.sha256},       {"backend", backend_name(c.backend)},
         {"agent", c.agent},         {"generation", c.generation},
         {"iteration", c.iteration}, {"file_name", c.file_name}};
  if (with_source) j["source"] = c.source;
  return j;
}

Result<CandidateRef> candidate_ref_from_json(const JsonField& f, bool with_source) {
  CandidateRef c;
  ATREX_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::open(f));
  ATREX_TRY(r.required("sha256", c.sha256));
  ATREX_TRY(r.required("backend", c.backend));
  ATREX_TRY(r.required("agent", c.agent));
  ATREX_TRY(r.required("generation", c.generation));
  ATREX_TRY(r.required("iteration", c.iteration));
  ATREX_TRY(r.required("file_name", c.file_name));
  if (with_source) ATREX_TRY(r.required("source", c.source));
  ATREX_TRY(r.finish());
  if (c.generation < 0 || c.iteration < 0) {
    return f.fail("generation and iteration must be non-negative");
  }
  return c;
}

Json to_json(const EvalTask& t) {
  return Json{{"schema", kEvalTaskSchema},
              {"kind", "eval"},
              {"task_id", t.task_id},
              {"sweep_id", t.sweep_id},
              {"operator", t.operator_name},
              {"shape_ids", t.shape_ids},
              {"hardware", t.hardware},
              {"purpose", eval_purpose_name(t.purpose)},
              {"candidate", to_json(t.candidate, true)},
              {"settings", to_json(t.settings)}};
}

Result<EvalTask> eval_task_from_json(const Json& j, const std::string& source) {
  EvalTask t;
  ATREX_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::open(JsonField(j, source)));
  ATREX_TRY(r.schema(kEvalTaskSchema));
  ATREX_TRY(r.constant("kind", "eval"));
  ATREX_TRY(r.required("task_id", t.task_id));
  ATREX_TRY(r.required("sweep_id", t.sweep_id));
  ATREX_TRY(r.required("operator", t.operator_name));
  ATREX_TRY(r.required("shape_ids", t.shape_ids));
  ATREX_TRY(r.required("hardware", t.hardware));
  ATREX_TRY(r.required("purpose", t.purpose));
  ATREX_TRY(r.required("candidate", t.candidate,
                       [](const JsonField& c) { return candidate_ref_from_json(c, true); }));
  ATREX_TRY(r.required("settings", t.settings, [](const JsonField& s) {
    return eval_settings_from_json(s, {}, Completeness::kComplete);
  }));
  ATREX_TRY(r.finish());
  if (t.task_id.empty()) return r.field().fail("task_id must not be empty");
  return t;
}

}  // namespace atrex
