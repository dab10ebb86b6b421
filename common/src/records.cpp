#include "atrex/common/records.h"

#include <fmt/format.h>

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
  return "crashed";
}

Result<EvalStatus> parse_eval_status(std::string_view s) {
  for (auto st : {EvalStatus::kOk, EvalStatus::kCompileError, EvalStatus::kWrongResult,
                  EvalStatus::kTimeout, EvalStatus::kCrashed, EvalStatus::kRejected}) {
    if (s == eval_status_name(st)) return st;
  }
  return invalid_input(fmt::format("unknown eval status \"{}\"", s));
}

Json to_json(const EvalSettings& s) {
  return Json{{"seeds", s.seeds},
              {"atol", s.atol},
              {"rtol", s.rtol},
              {"performance", s.performance},
              {"warmup_iterations", s.warmup_iterations},
              {"min_iterations", s.min_iterations},
              {"max_iterations", s.max_iterations},
              {"min_time_s", s.min_time_s},
              {"max_timing_s", s.max_timing_s},
              {"target_rse", s.target_rse},
              {"timing_mode", s.timing_mode},
              {"shape_timeout_s", s.shape_timeout_s},
              {"compile_timeout_s", s.compile_timeout_s},
              {"roofline", s.roofline},
              {"range_probe", s.range_probe},
              {"unseen_shapes", s.unseen_shapes}};
}

namespace {

// Reads optional member `key` of `f` into `out` with range checking.
template <class T>
Result<void> read_opt(const JsonField& f, const char* key, T& out, double lo, double hi) {
  if (!f.has(key)) return ok();
  auto child = f.at(key);
  if (!child) return tl::unexpected(child.error());
  if constexpr (std::is_same_v<T, bool>) {
    auto v = child->as_bool();
    if (!v) return tl::unexpected(v.error());
    out = *v;
  } else if constexpr (std::is_integral_v<T>) {
    auto v = child->as_int();
    if (!v) return tl::unexpected(v.error());
    if (*v < lo || *v > hi)
      return child->fail(fmt::format("expected an integer in [{}, {}]", lo, hi));
    out = static_cast<T>(*v);
  } else {
    auto v = child->as_number();
    if (!v) return tl::unexpected(v.error());
    if (*v < lo || *v > hi)
      return child->fail(fmt::format("expected a number in [{}, {}]", lo, hi));
    out = *v;
  }
  return ok();
}

Json candidate_json(const CandidateRef& c, bool with_source) {
  Json j{{"sha256", c.sha256},         {"backend", c.backend},     {"agent", c.agent},
         {"generation", c.generation}, {"iteration", c.iteration}, {"file_name", c.file_name}};
  if (with_source) j["source"] = c.source;
  return j;
}

Result<CandidateRef> candidate_from_json(const JsonField& f) {
  CandidateRef c;
  ATREX_TRY(f.expect_object());
  auto str = [&](const char* key, std::string& out) -> Result<void> {
    auto child = f.at(key);
    if (!child) return tl::unexpected(child.error());
    auto v = child->as_string();
    if (!v) return tl::unexpected(v.error());
    out = *v;
    return ok();
  };
  ATREX_TRY(str("sha256", c.sha256));
  ATREX_TRY(str("backend", c.backend));
  ATREX_TRY(str("agent", c.agent));
  if (f.has("file_name")) ATREX_TRY(str("file_name", c.file_name));
  if (f.has("source")) ATREX_TRY(str("source", c.source));
  ATREX_TRY(read_opt(f, "generation", c.generation, 0, 1e9));
  ATREX_TRY(read_opt(f, "iteration", c.iteration, 0, 1e9));
  return c;
}

}  // namespace

Json to_json(const TimingSummary& t) {
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
              {"kernels", t.kernels},
              {"cupti_records", t.cupti_records}};
}

TimingSummary timing_summary_from_json(const Json& j) {
  TimingSummary t;
  t.time_us_median = j.value("time_us_median", 0.0);
  t.time_us_p25 = j.value("time_us_p25", 0.0);
  t.time_us_p75 = j.value("time_us_p75", 0.0);
  t.time_us_iqr = j.value("time_us_iqr", 0.0);
  t.time_us_min = j.value("time_us_min", 0.0);
  t.time_us_mean = j.value("time_us_mean", 0.0);
  t.n = j.value("n", 0);
  if (j.contains("samples_us") && j["samples_us"].is_array())
    t.samples_us = j["samples_us"].get<std::vector<double>>();
  t.method = j.value("method", "");
  t.relative_standard_error = j.value("relative_standard_error", 0.0);
  t.graph_fallback = j.value("graph_fallback", "");
  if (j.contains("event_time_us_median") && j["event_time_us_median"].is_number()) {
    t.event_time_us_median = j["event_time_us_median"].get<double>();
  }
  t.cupti_fallback = j.value("cupti_fallback", "");
  t.cupti_unavailable = j.value("cupti_unavailable", "");
  if (j.contains("kernels") && j["kernels"].is_array()) t.kernels = j["kernels"];
  if (j.contains("cupti_records") && j["cupti_records"].is_object())
    t.cupti_records = j["cupti_records"];
  return t;
}

Result<EvalSettings> eval_settings_from_json(const JsonField& f, const EvalSettings& base) {
  EvalSettings s = base;
  ATREX_TRY(f.expect_object());
  for (auto& [key, _] : f.value().items()) {
    static const char* kKnown[] = {"seeds",
                                   "atol",
                                   "rtol",
                                   "performance",
                                   "warmup_iterations",
                                   "min_iterations",
                                   "max_iterations",
                                   "min_time_s",
                                   "max_timing_s",
                                   "shape_timeout_s",
                                   "compile_timeout_s",
                                   "roofline",
                                   "target_rse",
                                   "timing_mode",
                                   "range_probe",
                                   "unseen_shapes"};
    bool known = false;
    for (const char* k : kKnown) known = known || key == k;
    if (!known) {
      return invalid_input(fmt::format("{}: field \"{}{}{}\" is not a known evaluation setting",
                                       f.source(), f.path(), f.path().empty() ? "" : ".", key));
    }
  }
  ATREX_TRY(read_opt(f, "seeds", s.seeds, 1, 1000));
  ATREX_TRY(read_opt(f, "atol", s.atol, 0, 1e9));
  ATREX_TRY(read_opt(f, "rtol", s.rtol, 0, 1e9));
  ATREX_TRY(read_opt(f, "performance", s.performance, 0, 1));
  ATREX_TRY(read_opt(f, "warmup_iterations", s.warmup_iterations, 0, 1e6));
  ATREX_TRY(read_opt(f, "min_iterations", s.min_iterations, 1, 1e7));
  ATREX_TRY(read_opt(f, "max_iterations", s.max_iterations, 1, 1e7));
  ATREX_TRY(read_opt(f, "min_time_s", s.min_time_s, 0, 3600));
  ATREX_TRY(read_opt(f, "max_timing_s", s.max_timing_s, 0.01, 3600));
  ATREX_TRY(read_opt(f, "target_rse", s.target_rse, 0, 1));
  ATREX_TRY(read_opt(f, "shape_timeout_s", s.shape_timeout_s, 0.1, 86400));
  ATREX_TRY(read_opt(f, "compile_timeout_s", s.compile_timeout_s, 0.1, 86400));
  ATREX_TRY(read_opt(f, "range_probe", s.range_probe, 0, 1));
  ATREX_TRY(read_opt(f, "unseen_shapes", s.unseen_shapes, 0, 64));
  if (f.has("roofline")) {
    ATREX_ASSIGN_OR_RETURN(auto rf, f.at("roofline"));
    ATREX_ASSIGN_OR_RETURN(s.roofline, rf.as_string());
    if (s.roofline != "released" && s.roofline != "analytic")
      return rf.fail("expected released or analytic");
  }
  if (f.has("timing_mode")) {
    ATREX_ASSIGN_OR_RETURN(auto tf, f.at("timing_mode"));
    ATREX_ASSIGN_OR_RETURN(s.timing_mode, tf.as_string());
    if (s.timing_mode != "auto" && s.timing_mode != "cupti" && s.timing_mode != "graph" &&
        s.timing_mode != "eager") {
      return tf.fail("expected auto, cupti, graph or eager");
    }
  }
  if (s.max_iterations < s.min_iterations) {
    return invalid_input(
        fmt::format("{}: field \"{}\": max_iterations ({}) is below min_iterations ({})",
                    f.source(), f.path(), s.max_iterations, s.min_iterations));
  }
  return s;
}

Json to_json(const EvalTask& t) {
  return Json{{"schema", kEvalTaskSchema},
              {"kind", "eval"},
              {"task_id", t.task_id},
              {"sweep_id", t.sweep_id},
              {"operator", t.operator_name},
              {"shape_ids", t.shape_ids},
              {"hardware", t.hardware},
              {"purpose", t.purpose},
              {"candidate", candidate_json(t.candidate, true)},
              {"settings", to_json(t.settings)}};
}

Result<EvalTask> eval_task_from_json(const Json& j, const std::string& source) {
  JsonField root(j, source);
  ATREX_TRY(root.expect_object());
  if (j.value("schema", "") != kEvalTaskSchema)
    return root.fail(fmt::format("expected schema \"{}\"", kEvalTaskSchema));
  EvalTask t;
  try {
    t.task_id = j.at("task_id").get<std::string>();
    t.sweep_id = j.value("sweep_id", "");
    t.operator_name = j.at("operator").get<std::string>();
    t.shape_ids = j.at("shape_ids").get<std::vector<std::string>>();
    t.hardware = j.value("hardware", "");
    t.purpose = j.value("purpose", "");
  } catch (const Json::exception& e) {
    return invalid_input(fmt::format("{}: malformed eval task: {}", source, e.what()));
  }
  auto cand = root.at("candidate");
  if (!cand) return tl::unexpected(cand.error());
  auto c = candidate_from_json(*cand);
  if (!c) return tl::unexpected(c.error());
  t.candidate = std::move(*c);
  if (root.has("settings")) {
    auto sf = root.at("settings");
    auto s = eval_settings_from_json(*sf);
    if (!s) return tl::unexpected(s.error());
    t.settings = *s;
  }
  return t;
}

Json to_json(const EvalRecord& r) {
  Json j{{"schema", kEvalRecordSchema},
         {"task_id", r.task_id},
         {"sweep_id", r.sweep_id},
         {"operator", r.operator_name},
         {"shape_id", r.shape_id},
         {"candidate", candidate_json(r.candidate, false)},
         {"hardware", r.hardware},
         {"device", r.device},
         {"runner", r.runner},
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
         {"unseen_shapes", r.unseen_shapes}};
  if (r.unlaunched_kernels) j["unlaunched_kernels"] = *r.unlaunched_kernels;
  return j;
}

Result<EvalRecord> eval_record_from_json(const Json& j, const std::string& source) {
  JsonField root(j, source);
  ATREX_TRY(root.expect_object());
  if (j.value("schema", "") != kEvalRecordSchema)
    return root.fail(fmt::format("expected schema \"{}\"", kEvalRecordSchema));
  EvalRecord r;
  try {
    r.task_id = j.value("task_id", "");
    r.sweep_id = j.value("sweep_id", "");
    r.operator_name = j.at("operator").get<std::string>();
    r.shape_id = j.at("shape_id").get<std::string>();
    r.hardware = j.value("hardware", "");
    r.device = j.value("device", "");
    r.runner = j.value("runner", "");
    auto st = parse_eval_status(j.at("status").get<std::string>());
    if (!st) return invalid_input(fmt::format("{}: {}", source, st.error().message));
    r.status = *st;
    r.error = j.value("error", "");
    r.max_abs_error = j.value("max_abs_error", 0.0);
    r.max_rel_error = j.value("max_rel_error", 0.0);
    if (j.contains("low_signal_outputs"))
      r.low_signal_outputs = j["low_signal_outputs"].get<std::vector<std::string>>();
    r.seeds_passed = j.value("seeds_passed", 0);
    if (j.contains("timing") && j["timing"].is_object())
      r.timing = timing_summary_from_json(j["timing"]);
    r.t_roofline_us = j.value("t_roofline_us", 0.0);
    if (j.contains("s_j") && j["s_j"].is_number()) r.s_j = j["s_j"].get<double>();
    r.above_roofline = j.value("above_roofline", false);
    if (j.contains("dsl_share") && j["dsl_share"].is_number())
      r.dsl_share = j["dsl_share"].get<double>();
    if (j.contains("clocks")) r.clocks = j["clocks"];
    r.wall_s = j.value("wall_s", 0.0);
    if (j.contains("phases_s") && j["phases_s"].is_object()) r.phases_s = j["phases_s"];
    r.created_at = j.value("created_at", "");
    r.range_probe = j.value("range_probe", "");
    if (j.contains("unseen_shapes") && j["unseen_shapes"].is_array())
      r.unseen_shapes = j["unseen_shapes"];
    if (j.contains("unlaunched_kernels") && j["unlaunched_kernels"].is_array()) {
      r.unlaunched_kernels = j["unlaunched_kernels"].get<std::vector<std::string>>();
    }
  } catch (const Json::exception& e) {
    return invalid_input(fmt::format("{}: malformed eval record: {}", source, e.what()));
  }
  auto cand = root.at("candidate");
  if (!cand) return tl::unexpected(cand.error());
  auto c = candidate_from_json(*cand);
  if (!c) return tl::unexpected(c.error());
  r.candidate = std::move(*c);
  return r;
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

std::string record_key(const std::string& task_id, const std::string& shape_id) {
  return task_id + "/" + shape_id;
}

}  // namespace atrex
