#include "atrex/common/wire/eval_record.h"

#include <fmt/format.h>

#include "atrex/common/wire/reader.h"

namespace atrex {

const char* eval_status_name(EvalStatus s) {
  switch (s) {
    case EvalStatus::kOk: return "ok";
    case EvalStatus::kCompileError: return "compile_error";
    case EvalStatus::kWrongResult: return "wrong_result";
    case EvalStatus::kTimeout: return "timeout";
    case EvalStatus::kCrashed: return "crashed";
    case EvalStatus::kRejected: return "rejected";
  }
  ATREX_UNREACHABLE("EvalStatus");
}

Result<EvalStatus> parse_eval_status(std::string_view s) {
  for (auto st : {EvalStatus::kOk, EvalStatus::kCompileError, EvalStatus::kWrongResult,
                  EvalStatus::kTimeout, EvalStatus::kCrashed, EvalStatus::kRejected}) {
    if (s == eval_status_name(st)) return st;
  }
  return invalid_input(fmt::format("unknown eval status \"{}\"", s));
}

Result<void> read_value(const JsonField& f, EvalStatus& out) {
  return read_enum(f, out,
                   {EvalStatus::kOk, EvalStatus::kCompileError, EvalStatus::kWrongResult,
                    EvalStatus::kTimeout, EvalStatus::kCrashed, EvalStatus::kRejected},
                   eval_status_name,
                   "ok, compile_error, wrong_result, timeout, crashed or rejected");
}

Result<void> read_value(const JsonField& f, KernelShare& out) {
  ATREX_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::open(f));
  ATREX_TRY(r.required("name", out.name));
  ATREX_TRY(r.required("share", out.share));
  ATREX_TRY(r.required("own", out.own));
  return r.finish();
}

Json to_json(const TimingSummary& t) {
  Json kernels = Json::array();
  for (const auto& k : t.kernels) {
    kernels.push_back(Json{{"name", k.name}, {"share", k.share}, {"own", k.own}});
  }
  return Json{{"time_us_median", t.time_us_median},
              {"time_us_p25", t.time_us_p25},
              {"time_us_p75", t.time_us_p75},
              {"time_us_iqr", t.time_us_iqr},
              {"time_us_min", t.time_us_min},
              {"time_us_mean", t.time_us_mean},
              {"n", t.n},
              {"samples_us", t.samples_us},
              {"method", t.method},
              {"relative_standard_error", t.relative_standard_error},
              {"graph_fallback", t.graph_fallback},
              {"event_time_us_median",
               t.event_time_us_median ? Json(*t.event_time_us_median) : Json(nullptr)},
              {"cupti_fallback", t.cupti_fallback},
              {"cupti_unavailable", t.cupti_unavailable},
              {"kernels", kernels},
              {"cupti_records", t.cupti_records}};
}

Result<void> read_value(const JsonField& f, TimingSummary& t) {
  ATREX_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::open(f));
  ATREX_TRY(r.required("time_us_median", t.time_us_median));
  ATREX_TRY(r.required("time_us_p25", t.time_us_p25));
  ATREX_TRY(r.required("time_us_p75", t.time_us_p75));
  ATREX_TRY(r.required("time_us_iqr", t.time_us_iqr));
  ATREX_TRY(r.required("time_us_min", t.time_us_min));
  ATREX_TRY(r.required("time_us_mean", t.time_us_mean));
  ATREX_TRY(r.required("n", t.n));
  ATREX_TRY(r.required("samples_us", t.samples_us));
  ATREX_TRY(r.required("method", t.method));
  ATREX_TRY(r.required("relative_standard_error", t.relative_standard_error));
  ATREX_TRY(r.required("graph_fallback", t.graph_fallback));
  ATREX_TRY(r.required("event_time_us_median", t.event_time_us_median));
  ATREX_TRY(r.required("cupti_fallback", t.cupti_fallback));
  ATREX_TRY(r.required("cupti_unavailable", t.cupti_unavailable));
  ATREX_TRY(r.required("kernels", t.kernels));
  ATREX_TRY(r.required("cupti_records", t.cupti_records));
  return r.finish();
}

Json to_json(const UnseenShapeResult& u) {
  return Json{{"shape", u.shape},
              {"base_shape_id", u.base_shape_id},
              {"params", u.params},
              {"status", eval_status_name(u.status)},
              {"error", u.error}};
}

Result<void> read_value(const JsonField& f, UnseenShapeResult& u) {
  ATREX_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::open(f));
  ATREX_TRY(r.required("shape", u.shape));
  ATREX_TRY(r.required("base_shape_id", u.base_shape_id));
  ATREX_TRY(r.required("params", u.params));
  ATREX_TRY(r.required("status", u.status));
  ATREX_TRY(r.required("error", u.error));
  return r.finish();
}

Json to_json(const EvalRecord& r) {
  Json unseen = Json::array();
  for (const auto& u : r.unseen_shapes) unseen.push_back(to_json(u));
  Json j{{"schema", kEvalRecordSchema},
         {"task_id", r.task_id},
         {"sweep_id", r.sweep_id},
         {"operator", r.operator_name},
         {"shape_id", r.shape_id},
         {"candidate", to_json(r.candidate, false)},
         {"hardware", r.hardware},
         {"device", r.device},
         {"runner", r.runner},
         {"sandbox", sandbox_mode_name(r.sandbox)},
         {"judge_reads", r.judge_reads ? judge_reads_name(*r.judge_reads) : ""},
         {"status", eval_status_name(r.status)},
         {"error", r.error},
         {"max_abs_error", r.max_abs_error},
         {"max_rel_error", r.max_rel_error},
         {"low_signal_outputs", r.low_signal_outputs},
         {"seeds_passed", r.seeds_passed},
         {"timing", r.timing ? to_json(*r.timing) : Json(nullptr)},
         {"t_roofline_us", r.t_roofline_us},
         {"s_j", r.s_j ? Json(*r.s_j) : Json(nullptr)},
         {"above_roofline", r.above_roofline},
         {"dsl_share", r.dsl_share ? Json(*r.dsl_share) : Json(nullptr)},
         {"clocks", r.clocks},
         {"wall_s", r.wall_s},
         {"phases_s", r.phases_s},
         {"created_at", r.created_at},
         {"range_probe", r.range_probe},
         {"edge_case", r.edge_case},
         {"unseen_shapes", unseen}};
  if (r.unlaunched_kernels) j["unlaunched_kernels"] = *r.unlaunched_kernels;
  return j;
}

const char* judge_reads_name(JudgeReads r) {
  switch (r) {
    case JudgeReads::kDeviceArena: return "device_arena";
    case JudgeReads::kMemfd: return "memfd";
  }
  ATREX_UNREACHABLE("JudgeReads");
}

Result<EvalRecord> eval_record_from_json(const Json& j, const std::string& source) {
  EvalRecord rec;
  ATREX_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::open(JsonField(j, source)));
  ATREX_TRY(r.schema(kEvalRecordSchema));
  ATREX_TRY(r.required("task_id", rec.task_id));
  ATREX_TRY(r.required("sweep_id", rec.sweep_id));
  ATREX_TRY(r.required("operator", rec.operator_name));
  ATREX_TRY(r.required("shape_id", rec.shape_id));
  ATREX_TRY(r.required("candidate", rec.candidate,
                       [](const JsonField& c) { return candidate_ref_from_json(c, false); }));
  ATREX_TRY(r.required("hardware", rec.hardware));
  ATREX_TRY(r.required("device", rec.device));
  ATREX_TRY(r.required("runner", rec.runner));
  ATREX_TRY(r.required("sandbox", rec.sandbox));
  std::string reads;
  ATREX_TRY(r.optional("judge_reads", reads));
  if (reads == "device_arena") {
    rec.judge_reads = JudgeReads::kDeviceArena;
  } else if (reads == "memfd") {
    rec.judge_reads = JudgeReads::kMemfd;
  } else if (!reads.empty()) {
    return make_error(
        ErrorCode::kInvalidInput,
        fmt::format("{}: judge_reads: \"{}\" is neither device_arena nor memfd", source, reads));
  }
  ATREX_TRY(r.required("status", rec.status));
  ATREX_TRY(r.required("error", rec.error));
  ATREX_TRY(r.required("max_abs_error", rec.max_abs_error));
  ATREX_TRY(r.required("max_rel_error", rec.max_rel_error));
  ATREX_TRY(r.required("low_signal_outputs", rec.low_signal_outputs));
  ATREX_TRY(r.required("seeds_passed", rec.seeds_passed));
  ATREX_TRY(r.required("timing", rec.timing));
  ATREX_TRY(r.required("t_roofline_us", rec.t_roofline_us));
  ATREX_TRY(r.required("s_j", rec.s_j));
  ATREX_TRY(r.required("above_roofline", rec.above_roofline));
  ATREX_TRY(r.required("dsl_share", rec.dsl_share));
  ATREX_TRY(r.required("clocks", rec.clocks));
  ATREX_TRY(r.required("wall_s", rec.wall_s));
  ATREX_TRY(r.required("phases_s", rec.phases_s));
  ATREX_TRY(r.required("created_at", rec.created_at));
  ATREX_TRY(r.required("range_probe", rec.range_probe));
  ATREX_TRY(r.required("edge_case", rec.edge_case));
  ATREX_TRY(r.required("unseen_shapes", rec.unseen_shapes));
  ATREX_TRY(r.optional("unlaunched_kernels", rec.unlaunched_kernels));
  ATREX_TRY(r.finish());
  return rec;
}

EvalRecord new_eval_record(const EvalTask& task, const std::string& shape_id,
                           const std::string& device) {
  EvalRecord r;
  r.task_id = task.task_id;
  r.sweep_id = task.sweep_id;
  r.operator_name = task.operator_name;
  r.shape_id = shape_id;
  r.candidate = task.candidate;
  r.candidate.source.clear();  // records never carry source
  r.hardware = task.hardware;
  r.device = device;
  return r;
}

}  // namespace atrex
