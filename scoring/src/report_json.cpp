// atrex.report/1 as JSON: the writer and its strict reader (every member a report holds is
// read and nothing else is accepted, as the wire types of common/wire do).
#include <fmt/format.h>

#include "atrex/common/wire/reader.h"
#include "atrex/scoring/report.h"

namespace atrex::scoring {
namespace {

template <class T>
Json opt(const std::optional<T>& v) {
  return v ? Json(*v) : Json(nullptr);
}

Json shape_json(const ShapeDetail& d) {
  return Json{{"shape_id", d.shape_id},
              {"status", d.status},
              {"time_us_median", opt(d.time_us_median)},
              {"time_us_p25", opt(d.time_us_p25)},
              {"time_us_p75", opt(d.time_us_p75)},
              {"samples", d.samples},
              {"relative_standard_error", d.relative_standard_error},
              {"noisy", d.noisy},
              {"t_roofline_us", d.t_roofline_us},
              {"s_j", opt(d.s_j)},
              {"above_roofline", d.above_roofline},
              {"bound", d.bound},
              {"dsl_share", opt(d.dsl_share)},
              {"error", d.error},
              {"baseline_time_us_median", opt(d.baseline_time_us_median)}};
}

Json operator_json(const OperatorScore& o) {
  Json shapes = Json::array();
  for (const auto& d : o.shapes) shapes.push_back(shape_json(d));
  return Json{{"operator", o.name},
              {"weight", o.weight},
              {"attempted", o.attempted},
              {"status", o.status},
              {"s_i", o.s_i},
              {"s_i_ci_low", opt(o.s_i_ci_low)},
              {"s_i_ci_high", opt(o.s_i_ci_high)},
              {"weighted_s_i", o.weight * o.s_i},
              {"shapes_in_suite", o.shapes_in_suite},
              {"shapes_evaluated", o.shapes_evaluated},
              {"shapes_correct", o.shapes_correct},
              {"shapes_above_roofline", o.shapes_above_roofline},
              {"shapes_noisy", o.shapes_noisy},
              {"dsl_share", opt(o.dsl_share)},
              {"fallback", o.fallback},
              {"python", o.python},
              {"candidate_sha256", o.candidate_sha256},
              {"first_error", o.first_error},
              {"unlaunched_kernels", o.unlaunched_kernels},
              {"baseline_s_i", opt(o.baseline_s_i)},
              {"shapes", shapes}};
}

Json sweep_json(const SweepSummary& s) {
  return Json{{"sweep_id", s.sweep_id},          {"name", s.name},
              {"source", s.source},              {"hardware", s.hardware},
              {"backend", s.backend},            {"device", s.device},
              {"status", s.status},              {"records_read", s.records_read},
              {"lines_read", s.lines_read},      {"duplicates_dropped", s.duplicates_dropped},
              {"finals_expected", s.finals_expected}, {"finals_found", s.finals_found},
              {"builds", s.builds}};
}

}  // namespace

// Found by argument-dependent lookup from the vector/optional readers of common/wire/reader.h,
// so not in the anonymous namespace.
Result<void> read_value(const JsonField& f, ShapeDetail& d) {
  ATREX_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::open(f));
  ATREX_TRY(r.required("shape_id", d.shape_id));
  ATREX_TRY(r.required("status", d.status));
  ATREX_TRY(r.required("time_us_median", d.time_us_median));
  ATREX_TRY(r.required("time_us_p25", d.time_us_p25));
  ATREX_TRY(r.required("time_us_p75", d.time_us_p75));
  ATREX_TRY(r.required("samples", d.samples));
  ATREX_TRY(r.required("relative_standard_error", d.relative_standard_error));
  ATREX_TRY(r.optional("noisy", d.noisy));  // optional: reports written before it
  ATREX_TRY(r.required("t_roofline_us", d.t_roofline_us));
  ATREX_TRY(r.required("s_j", d.s_j));
  ATREX_TRY(r.required("above_roofline", d.above_roofline));
  ATREX_TRY(r.required("bound", d.bound));
  ATREX_TRY(r.required("dsl_share", d.dsl_share));
  ATREX_TRY(r.required("error", d.error));
  ATREX_TRY(r.required("baseline_time_us_median", d.baseline_time_us_median));
  return r.finish();
}

Result<void> read_value(const JsonField& f, OperatorScore& o) {
  ATREX_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::open(f));
  double weighted = 0;
  ATREX_TRY(r.required("operator", o.name));
  ATREX_TRY(r.required("weight", o.weight));
  ATREX_TRY(r.required("attempted", o.attempted));
  ATREX_TRY(r.required("status", o.status));
  ATREX_TRY(r.required("s_i", o.s_i));
  ATREX_TRY(r.optional("s_i_ci_low", o.s_i_ci_low));  // optional: reports written before them
  ATREX_TRY(r.optional("s_i_ci_high", o.s_i_ci_high));
  ATREX_TRY(r.required("weighted_s_i", weighted));
  ATREX_TRY(r.required("shapes_in_suite", o.shapes_in_suite));
  ATREX_TRY(r.required("shapes_evaluated", o.shapes_evaluated));
  ATREX_TRY(r.required("shapes_correct", o.shapes_correct));
  ATREX_TRY(r.required("shapes_above_roofline", o.shapes_above_roofline));
  ATREX_TRY(r.optional("shapes_noisy", o.shapes_noisy));
  ATREX_TRY(r.required("dsl_share", o.dsl_share));
  ATREX_TRY(r.required("fallback", o.fallback));
  ATREX_TRY(r.optional("python", o.python));  // optional: reports written before it
  ATREX_TRY(r.required("candidate_sha256", o.candidate_sha256));
  ATREX_TRY(r.required("first_error", o.first_error));
  ATREX_TRY(r.required("unlaunched_kernels", o.unlaunched_kernels));
  ATREX_TRY(r.required("baseline_s_i", o.baseline_s_i));
  ATREX_TRY(r.required("shapes", o.shapes));
  return r.finish();
}

Result<void> read_value(const JsonField& f, AgentScore& a) {
  ATREX_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::open(f));
  ATREX_TRY(r.required("agent", a.agent));
  ATREX_TRY(r.required("sweep_id", a.sweep_id));
  ATREX_TRY(r.required("provider", a.provider));
  ATREX_TRY(r.required("s_agg", a.s_agg));
  ATREX_TRY(r.required("operators_attempted", a.operators_attempted));
  ATREX_TRY(r.required("operators_correct", a.operators_correct));
  ATREX_TRY(r.required("operators_fallback", a.operators_fallback));
  ATREX_TRY(r.required("correctness_rate", a.correctness_rate));
  ATREX_TRY(r.required("dsl_adoption_rate", a.dsl_adoption_rate));
  ATREX_TRY(r.required("usage", a.usage));
  ATREX_TRY(r.required("operators", a.operators));
  return r.finish();
}

Result<void> read_value(const JsonField& f, SweepSummary& s) {
  ATREX_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::open(f));
  ATREX_TRY(r.required("sweep_id", s.sweep_id));
  ATREX_TRY(r.required("name", s.name));
  ATREX_TRY(r.required("source", s.source));
  ATREX_TRY(r.required("hardware", s.hardware));
  ATREX_TRY(r.required("backend", s.backend));
  ATREX_TRY(r.required("device", s.device));
  ATREX_TRY(r.required("status", s.status));
  ATREX_TRY(r.required("records_read", s.records_read));
  ATREX_TRY(r.required("lines_read", s.lines_read));
  ATREX_TRY(r.required("duplicates_dropped", s.duplicates_dropped));
  ATREX_TRY(r.required("finals_expected", s.finals_expected));
  ATREX_TRY(r.required("finals_found", s.finals_found));
  ATREX_TRY(r.optional("builds", s.builds));  // absent in reports of atrex before 2026-12
  return r.finish();
}

Result<void> read_value(const JsonField& f, BaselineSummary& b) {
  ATREX_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::open(f));
  ATREX_TRY(r.required("label", b.label));
  ATREX_TRY(r.required("source", b.source));
  ATREX_TRY(r.required("sweep_id", b.sweep_id));
  return r.finish();
}

Result<void> read_value(const JsonField& f, DeadLetterSummary& d) {
  ATREX_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::open(f));
  ATREX_TRY(r.required("queue", d.queue));
  ATREX_TRY(r.required("message_id", d.message_id));
  ATREX_TRY(r.required("deliveries", d.deliveries));
  ATREX_TRY(r.required("error", d.error));
  ATREX_TRY(r.required("kind", d.kind));
  ATREX_TRY(r.required("operator", d.op));
  ATREX_TRY(r.required("agent", d.agent));
  if (d.kind == "eval") {
    ATREX_TRY(r.required("task_id", d.task_id));
    ATREX_TRY(r.required("purpose", d.purpose));
    ATREX_TRY(r.required("candidate", d.candidate));
    ATREX_TRY(r.required("candidate_sha256", d.candidate_sha256));
  } else {
    ATREX_TRY(r.required("generation", d.generation));
  }
  return r.finish();
}

Json to_json(const Report& report) {
  const ReportContext& ctx = report.context;
  Json j{{"schema", kReportSchema}, {"sweep_id", ctx.sweep_id},    {"sweep_name", ctx.sweep_name},
         {"suite", ctx.suite_dir},  {"hardware", ctx.hardware},    {"backend", ctx.backend},
         {"device", ctx.device},    {"created_at", ctx.created_at}, {"partial", report.partial},
         {"warnings", report.warnings}};
  Json sweeps = Json::array();
  for (const auto& s : report.sweeps) sweeps.push_back(sweep_json(s));
  j["sweeps"] = sweeps;
  Json arr = Json::array();
  for (const auto& a : report.agents) {
    Json ops = Json::array();
    for (const auto& o : a.operators) ops.push_back(operator_json(o));
    arr.push_back(Json{
        {"agent", a.agent},
        {"sweep_id", a.sweep_id},
        {"provider", a.provider},
        {"s_agg", a.s_agg},
        {"operators_attempted", a.operators_attempted},
        {"operators_correct", a.operators_correct},
        {"operators_fallback", a.operators_fallback},
        {"correctness_rate", a.correctness_rate},
        {"dsl_adoption_rate", opt(a.dsl_adoption_rate)},
        {"usage", to_json(a.usage)},
        {"operators", ops}});
  }
  j["agents"] = arr;
  Json base = Json::array();
  for (const auto& b : report.baselines) {
    base.push_back(Json{{"label", b.label}, {"source", b.source}, {"sweep_id", b.sweep_id}});
  }
  j["baselines"] = base;
  Json dead = Json::array();
  for (const auto& d : report.dead_letters) dead.push_back(to_json(d));
  j["dead_letters"] = dead;
  return j;
}

Result<Report> report_from_json(const Json& j, const std::string& source) {
  Report rep;
  ATREX_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::open(JsonField(j, source)));
  ReportContext& c = rep.context;
  ATREX_TRY(r.schema(kReportSchema));
  ATREX_TRY(r.required("sweep_id", c.sweep_id));
  ATREX_TRY(r.required("sweep_name", c.sweep_name));
  ATREX_TRY(r.required("suite", c.suite_dir));
  ATREX_TRY(r.required("hardware", c.hardware));
  ATREX_TRY(r.required("backend", c.backend));
  ATREX_TRY(r.required("device", c.device));
  ATREX_TRY(r.required("created_at", c.created_at));
  ATREX_TRY(r.required("partial", rep.partial));
  ATREX_TRY(r.required("warnings", rep.warnings));
  ATREX_TRY(r.required("sweeps", rep.sweeps));
  ATREX_TRY(r.required("agents", rep.agents));
  ATREX_TRY(r.required("baselines", rep.baselines));
  ATREX_TRY(r.required("dead_letters", rep.dead_letters));
  ATREX_TRY(r.finish());
  return rep;
}

}  // namespace atrex::scoring
