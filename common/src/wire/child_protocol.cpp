#include "atrex/common/wire/child_protocol.h"

#include <fmt/format.h>

#include "atrex/common/wire/reader.h"

namespace atrex::runner {

TimingLoop timing_loop(const EvalSettings& s) {
  return TimingLoop{s.warmup_iterations, s.min_iterations, s.max_iterations, s.min_time_s,
                    s.max_timing_s,      s.target_rse,     s.timing_mode};
}

namespace {

Json to_json(const TimingLoop& t) {
  return Json{{"warmup_iterations", t.warmup_iterations},
              {"min_iterations", t.min_iterations},
              {"max_iterations", t.max_iterations},
              {"min_time_s", t.min_time_s},
              {"max_timing_s", t.max_timing_s},
              {"target_rse", t.target_rse},
              {"timing_mode", timing_mode_name(t.timing_mode)}};
}

Result<TimingLoop> timing_loop_from_json(const JsonField& f) {
  TimingLoop t;
  ATREX_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::open(f));
  ATREX_TRY(r.required("warmup_iterations", t.warmup_iterations));
  ATREX_TRY(r.required("min_iterations", t.min_iterations));
  ATREX_TRY(r.required("max_iterations", t.max_iterations));
  ATREX_TRY(r.required("min_time_s", t.min_time_s));
  ATREX_TRY(r.required("max_timing_s", t.max_timing_s));
  ATREX_TRY(r.required("target_rse", t.target_rse));
  ATREX_TRY(r.required("timing_mode", t.timing_mode));
  ATREX_TRY(r.finish());
  return t;
}

Json to_json(const ChildShape& s) {
  return Json{{"shape_id", s.shape_id},
              {"params", s.params},
              {"seeds", s.seeds},
              {"performance", s.performance},
              {"range_probe", s.range_probe},
              {"stop_task_on_failure", s.stop_task_on_failure},
              {"edge_cases", s.edge_cases}};
}

Result<ChildShape> child_shape_from_json(const JsonField& f) {
  ChildShape s;
  ATREX_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::open(f));
  ATREX_TRY(r.required("shape_id", s.shape_id));
  ATREX_TRY(r.required("params", s.params));
  ATREX_TRY(r.required("seeds", s.seeds));
  ATREX_TRY(r.required("performance", s.performance));
  ATREX_TRY(r.required("range_probe", s.range_probe));
  ATREX_TRY(r.required("stop_task_on_failure", s.stop_task_on_failure));
  ATREX_TRY(r.required("edge_cases", s.edge_cases));
  ATREX_TRY(r.finish());
  if (s.seeds.empty()) return f.fail("a shape needs at least one seed");
  return s;
}

Json to_json(const DumpItem& d) {
  return Json{{"operator", d.operator_name},
              {"shape_id", d.shape_id},
              {"params", d.params},
              {"init_kwargs", d.init_kwargs},
              {"input_kwargs", d.input_kwargs},
              {"seed", d.seed},
              {"backend", d.backend},
              {"out_dir", d.out_dir},
              {"atol", d.atol},
              {"rtol", d.rtol}};
}

Result<DumpItem> dump_item_from_json(const JsonField& f) {
  DumpItem d;
  ATREX_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::open(f));
  ATREX_TRY(r.required("operator", d.operator_name));
  ATREX_TRY(r.required("shape_id", d.shape_id));
  ATREX_TRY(r.required("params", d.params));
  ATREX_TRY(r.required("init_kwargs", d.init_kwargs));
  ATREX_TRY(r.required("input_kwargs", d.input_kwargs));
  ATREX_TRY(r.required("seed", d.seed));
  ATREX_TRY(r.required("backend", d.backend));
  ATREX_TRY(r.required("out_dir", d.out_dir));
  ATREX_TRY(r.required("atol", d.atol));
  ATREX_TRY(r.required("rtol", d.rtol));
  ATREX_TRY(r.finish());
  return d;
}

template <class T, class Parse>
Result<void> read_list(ObjectReader& r, const char* key, std::vector<T>& out, Parse parse) {
  ATREX_ASSIGN_OR_RETURN(JsonField list, r.field().at(key));
  r.skip(key);
  ATREX_TRY(list.expect_array());
  for (size_t i = 0; i < list.value().size(); ++i) {
    ATREX_ASSIGN_OR_RETURN(T item, parse(list.element(i)));
    out.push_back(std::move(item));
  }
  return ok();
}

}  // namespace

Json to_json(const ChildRequest& req) {
  if (req.dump) {
    Json items = Json::array();
    for (const auto& d : req.dump->items) items.push_back(to_json(d));
    return Json{{"schema", kChildRequestSchema}, {"mode", "dump"}, {"items", items}};
  }
  ATREX_ASSERT(req.task.has_value(), "a child request is a task or a dump");
  const ChildTaskRequest& t = *req.task;
  Json shapes = Json::array();
  for (const auto& s : t.shapes) shapes.push_back(to_json(s));
  return Json{{"schema", kChildRequestSchema}, {"mode", "task"},   {"operator", t.operator_name},
              {"library", t.library},          {"atol", t.atol},   {"rtol", t.rtol},
              {"timing", to_json(t.timing)},   {"shapes", shapes}, {"nonce", t.nonce},
              {"seccomp", t.seccomp}};
}

Result<ChildRequest> child_request_from_json(const Json& j, const std::string& source) {
  ChildRequest req;
  ATREX_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::open(JsonField(j, source)));
  ATREX_TRY(r.schema(kChildRequestSchema));
  std::string mode;
  ATREX_TRY(r.required("mode", mode));
  if (mode == "dump") {
    req.dump.emplace();
    ATREX_TRY(read_list(r, "items", req.dump->items, dump_item_from_json));
  } else if (mode == "task") {
    ChildTaskRequest& t = req.task.emplace();
    ATREX_TRY(r.required("operator", t.operator_name));
    ATREX_TRY(r.required("library", t.library));
    ATREX_TRY(r.required("atol", t.atol));
    ATREX_TRY(r.required("rtol", t.rtol));
    ATREX_TRY(r.required("timing", t.timing, timing_loop_from_json));
    ATREX_TRY(read_list(r, "shapes", t.shapes, child_shape_from_json));
    ATREX_TRY(r.required("nonce", t.nonce));
    ATREX_TRY(r.required("seccomp", t.seccomp));
  } else {
    ATREX_ASSIGN_OR_RETURN(JsonField m, r.field().at("mode"));
    return m.fail("expected task or dump");
  }
  ATREX_TRY(r.finish());
  return req;
}

Json to_json(const ChildShapeResponse& c) {
  Json j{{"schema", kChildResponseSchema},
         {"nonce", c.nonce},
         {"shape_id", c.shape_id},
         {"status", eval_status_name(c.status)},
         {"error", c.error},
         {"device", c.device},
         {"seeds_passed", c.seeds_passed},
         {"max_abs_error", c.max_abs_error},
         {"max_rel_error", c.max_rel_error},
         {"low_signal_outputs", c.low_signal_outputs},
         {"timing", c.timing ? to_json(*c.timing) : Json(nullptr)},
         {"dsl_share", c.dsl_share ? Json(*c.dsl_share) : Json(nullptr)},
         {"dsl_attribution_error", c.dsl_attribution_error},
         {"clocks", c.clocks},
         {"phases_s", c.phases_s},
         {"range_probe", c.range_probe},
         {"edge_case", c.edge_case},
         {"input_rotation", c.input_rotation},
         {"started_at_s", c.started_at_s},
         {"wall_s", c.wall_s}};
  if (c.unlaunched_kernels) j["unlaunched_kernels"] = *c.unlaunched_kernels;
  if (c.unlaunched_instantiations) j["unlaunched_instantiations"] = *c.unlaunched_instantiations;
  return j;
}

Result<ChildShapeResponse> child_shape_response_from_json(const Json& j,
                                                          const std::string& source) {
  ChildShapeResponse c;
  ATREX_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::open(JsonField(j, source)));
  ATREX_TRY(r.schema(kChildResponseSchema));
  ATREX_TRY(r.required("nonce", c.nonce));
  ATREX_TRY(r.required("shape_id", c.shape_id));
  ATREX_TRY(r.required("status", c.status));
  ATREX_TRY(r.required("error", c.error));
  ATREX_TRY(r.required("device", c.device));
  ATREX_TRY(r.required("seeds_passed", c.seeds_passed));
  ATREX_TRY(r.required("max_abs_error", c.max_abs_error));
  ATREX_TRY(r.required("max_rel_error", c.max_rel_error));
  ATREX_TRY(r.required("low_signal_outputs", c.low_signal_outputs));
  ATREX_TRY(r.required("timing", c.timing));
  ATREX_TRY(r.required("dsl_share", c.dsl_share));
  ATREX_TRY(r.required("dsl_attribution_error", c.dsl_attribution_error));
  ATREX_TRY(r.required("clocks", c.clocks));
  ATREX_TRY(r.required("phases_s", c.phases_s));
  ATREX_TRY(r.required("range_probe", c.range_probe));
  ATREX_TRY(r.required("edge_case", c.edge_case));
  ATREX_TRY(r.required("input_rotation", c.input_rotation));
  ATREX_TRY(r.required("started_at_s", c.started_at_s));
  ATREX_TRY(r.required("wall_s", c.wall_s));
  ATREX_TRY(r.optional("unlaunched_kernels", c.unlaunched_kernels));
  ATREX_TRY(r.optional("unlaunched_instantiations", c.unlaunched_instantiations));
  ATREX_TRY(r.finish());
  return c;
}

Json to_json(const JudgeVerdict& v) {
  return Json{{"schema", kJudgeVerdictSchema},
              {"nonce", v.nonce},
              {"shape_id", v.shape_id},
              {"status", eval_status_name(v.status)},
              {"error", v.error},
              {"tampering", v.tampering},
              {"claimed", eval_status_name(v.claimed)},
              {"seeds_passed", v.seeds_passed},
              {"max_abs_error", v.max_abs_error},
              {"max_rel_error", v.max_rel_error},
              {"low_signal_outputs", v.low_signal_outputs},
              {"range_probe", v.range_probe},
              {"edge_case", v.edge_case},
              {"checks", v.checks},
              {"timed_rechecks", v.timed_rechecks},
              {"post_timing_checks", v.post_timing_checks},
              {"post_timing_sets", v.post_timing_sets},
              {"timed", v.timed},
              {"bracket_us", v.bracket_us},
              {"bracket_calls", v.bracket_calls},
              {"bracket_overhead_us", v.bracket_overhead_us},
              {"bracket_latency_us", v.bracket_latency_us},
              {"start_latency_us", v.start_latency_us},
              {"brackets_hold_work", v.brackets_hold_work},
              {"device_arena", v.device_arena},
              {"judge_failed", v.judge_failed},
              {"checked_brackets", v.checked_brackets}};
}

Result<JudgeVerdict> judge_verdict_from_json(const Json& j, const std::string& source) {
  JudgeVerdict v;
  ATREX_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::open(JsonField(j, source)));
  ATREX_TRY(r.schema(kJudgeVerdictSchema));
  ATREX_TRY(r.required("nonce", v.nonce));
  ATREX_TRY(r.required("shape_id", v.shape_id));
  ATREX_TRY(r.required("status", v.status));
  ATREX_TRY(r.required("error", v.error));
  ATREX_TRY(r.required("tampering", v.tampering));
  ATREX_TRY(r.required("claimed", v.claimed));
  ATREX_TRY(r.required("seeds_passed", v.seeds_passed));
  ATREX_TRY(r.required("max_abs_error", v.max_abs_error));
  ATREX_TRY(r.required("max_rel_error", v.max_rel_error));
  ATREX_TRY(r.required("low_signal_outputs", v.low_signal_outputs));
  ATREX_TRY(r.required("range_probe", v.range_probe));
  ATREX_TRY(r.required("edge_case", v.edge_case));
  ATREX_TRY(r.required("checks", v.checks));
  ATREX_TRY(r.required("timed_rechecks", v.timed_rechecks));
  ATREX_TRY(r.required("post_timing_checks", v.post_timing_checks));
  ATREX_TRY(r.required("post_timing_sets", v.post_timing_sets));
  ATREX_TRY(r.required("timed", v.timed));
  ATREX_TRY(r.required("bracket_us", v.bracket_us));
  ATREX_TRY(r.required("bracket_calls", v.bracket_calls));
  ATREX_TRY(r.required("bracket_overhead_us", v.bracket_overhead_us));
  ATREX_TRY(r.required("bracket_latency_us", v.bracket_latency_us));
  ATREX_TRY(r.required("start_latency_us", v.start_latency_us));
  ATREX_TRY(r.required("brackets_hold_work", v.brackets_hold_work));
  ATREX_TRY(r.required("device_arena", v.device_arena));
  ATREX_TRY(r.required("judge_failed", v.judge_failed));
  ATREX_TRY(r.required("checked_brackets", v.checked_brackets));
  ATREX_TRY(r.finish());
  if (v.bracket_us.size() != v.bracket_calls.size())
    return JsonField(j, source).fail("bracket_us and bracket_calls differ in length");
  for (int k : v.checked_brackets) {
    if (k < 0 || static_cast<size_t>(k) >= v.bracket_us.size())
      return JsonField(j, source).fail(
          fmt::format("checked_brackets names bracket {} of {}", k, v.bracket_us.size()));
  }
  return v;
}

Json to_json(const ChildDumpResponse& d) {
  Json items = Json::array();
  for (const auto& i : d.items) {
    items.push_back(Json{{"operator", i.operator_name},
                         {"shape_id", i.shape_id},
                         {"status", i.status},
                         {"error", i.error},
                         {"out_dir", i.out_dir},
                         {"wall_s", i.wall_s}});
  }
  return Json{{"schema", kChildResponseSchema},
              {"mode", "dump"},
              {"device", d.device},
              {"items", items},
              {"status", d.crashed ? "crashed" : "ok"}};
}

Result<ChildDumpResponse> child_dump_response_from_json(const Json& j, const std::string& source) {
  ChildDumpResponse d;
  ATREX_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::open(JsonField(j, source)));
  ATREX_TRY(r.schema(kChildResponseSchema));
  ATREX_TRY(r.constant("mode", "dump"));
  ATREX_TRY(r.required("device", d.device));
  std::string status;
  ATREX_TRY(r.required("status", status));
  d.crashed = status == "crashed";
  ATREX_TRY(read_list(r, "items", d.items, [](const JsonField& f) -> Result<DumpItemResult> {
    DumpItemResult i;
    ATREX_ASSIGN_OR_RETURN(ObjectReader ir, ObjectReader::open(f));
    ATREX_TRY(ir.required("operator", i.operator_name));
    ATREX_TRY(ir.required("shape_id", i.shape_id));
    ATREX_TRY(ir.required("status", i.status));
    ATREX_TRY(ir.required("error", i.error));
    ATREX_TRY(ir.required("out_dir", i.out_dir));
    ATREX_TRY(ir.required("wall_s", i.wall_s));
    ATREX_TRY(ir.finish());
    return i;
  }));
  ATREX_TRY(r.finish());
  return d;
}

}  // namespace atrex::runner
