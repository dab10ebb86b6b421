#include "atrex/common/wire/judge_messages.h"

#include <fmt/format.h>

#include "atrex/common/wire/reader.h"

namespace atrex::runner {
namespace {

Result<void> expect_go(ObjectReader& r) {
  bool go = false;
  ATREX_TRY(r.required("go", go));
  if (!go) return r.field().fail("the judge's answer is not a go");
  return ok();
}

Result<void> read_key(ObjectReader& r, SetKey& key) {
  ATREX_TRY(r.required("seed", key.seed));
  ATREX_TRY(r.required("kind", key.kind));
  ATREX_TRY(r.required("variant", key.variant));
  if (key.variant < -1 || key.variant >= kMaxVariant) {
    ATREX_ASSIGN_OR_RETURN(JsonField v, r.field().at("variant"));
    return v.fail(fmt::format("expected -1 or a timed call's splice below {}", kMaxVariant));
  }
  return ok();
}

Json with_key(Json j, const SetKey& key) {
  j["seed"] = key.seed;
  j["kind"] = set_kind_name(key.kind);
  j["variant"] = key.variant;
  return j;
}

Result<JudgeCallEnd> read_call_end(ObjectReader& r, const Json& j, const std::string& source) {
  JudgeCallEnd m;
  ATREX_TRY(r.required("calls", m.calls));
  ATREX_TRY(r.finish());
  if (m.calls < 1 || m.calls > 100000)
    return JsonField(j, source).fail(fmt::format("a bracket of {} calls", m.calls));
  return m;
}

}  // namespace

const char* set_kind_name(SetKind k) {
  switch (k) {
    case SetKind::kUsual: return "usual";
    case SetKind::kRangeProbe: return "range_probe";
    case SetKind::kEdgeCase: return "edge_case";
  }
  ATREX_UNREACHABLE("SetKind");
}

Result<void> read_value(const JsonField& f, SetKind& out) {
  return read_enum(f, out, {SetKind::kUsual, SetKind::kRangeProbe, SetKind::kEdgeCase},
                   set_kind_name, "usual, range_probe or edge_case");
}

Json to_json(const JudgePrepare& m) {
  return with_key(Json{{"op", "prepare"}, {"shape_id", m.shape_id}}, m.key);
}
Json to_json(const JudgeCheck& m) {
  Json j = with_key(Json{{"op", "check"}, {"shape_id", m.shape_id}}, m.key);
  j["context"] = m.context;
  j["inputs"] = m.inputs;
  return j;
}
Json to_json(const JudgeInputsPublished&) { return Json{{"op", "inputs"}}; }
Json to_json(const JudgeTimingBegin& m) {
  return Json{{"op", "timing_begin"}, {"shape_id", m.shape_id}};
}
Json to_json(const JudgeCallBegin&) { return Json{{"op", "call_begin"}}; }
Json to_json(const JudgeTimingEnd&) { return Json{{"op", "timing_end"}}; }
Json to_json(const JudgeShapeEnd& m) {
  return Json{
      {"op", "shape_end"}, {"shape_id", m.shape_id}, {"status", eval_status_name(m.status)}};
}

Result<JudgeMessage> judge_message_from_json(const Json& j, const std::string& source) {
  ATREX_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::open(JsonField(j, source)));
  std::string op;
  ATREX_TRY(r.required("op", op));
  JudgeMessage out;
  if (op == "prepare") {
    JudgePrepare m;
    ATREX_TRY(r.required("shape_id", m.shape_id));
    ATREX_TRY(read_key(r, m.key));
    out = std::move(m);
  } else if (op == "check") {
    JudgeCheck m;
    ATREX_TRY(r.required("shape_id", m.shape_id));
    ATREX_TRY(read_key(r, m.key));
    ATREX_TRY(r.required("context", m.context));
    ATREX_TRY(r.required("inputs", m.inputs));
    out = std::move(m);
  } else if (op == "inputs") {
    out = JudgeInputsPublished{};
  } else if (op == "timing_begin") {
    JudgeTimingBegin m;
    ATREX_TRY(r.required("shape_id", m.shape_id));
    out = std::move(m);
  } else if (op == "call_begin") {
    out = JudgeCallBegin{};
  } else if (op == "call_end") {
    ATREX_ASSIGN_OR_RETURN(JudgeCallEnd m, read_call_end(r, j, source));
    return m;
  } else if (op == "timing_end") {
    out = JudgeTimingEnd{};
  } else if (op == "shape_end") {
    JudgeShapeEnd m;
    ATREX_TRY(r.required("shape_id", m.shape_id));
    ATREX_TRY(r.required("status", m.status));
    out = std::move(m);
  } else {
    ATREX_ASSIGN_OR_RETURN(JsonField f, r.field().at("op"));
    return f.fail(fmt::format("unknown op \"{}\"", op));
  }
  ATREX_TRY(r.finish());
  return out;
}

Json to_json(const JudgeCheckReply& m) { return Json{{"pass", m.pass}, {"error", m.error}}; }

Result<JudgeCheckReply> judge_check_reply_from_json(const Json& j, const std::string& source) {
  JudgeCheckReply m;
  ATREX_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::open(JsonField(j, source)));
  ATREX_TRY(r.required("pass", m.pass));
  ATREX_TRY(r.required("error", m.error));
  bool go = false;
  ATREX_TRY(r.optional("go", go));  // the judge's stop (judge_stop()): never a go
  if (r.has("go") && (go || m.pass)) return JsonField(j, source).fail("a stop that is a go");
  ATREX_TRY(r.finish());
  return m;
}

Json to_json(const JudgeCallGo& m) { return Json{{"go", true}, {"splice", m.splice}}; }

Result<JudgeCallGo> judge_call_go_from_json(const Json& j, const std::string& source) {
  JudgeCallGo m;
  ATREX_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::open(JsonField(j, source)));
  ATREX_TRY(expect_go(r));
  ATREX_TRY(r.required("splice", m.splice));
  ATREX_TRY(r.finish());
  if (m.splice < 0 || m.splice >= kJudgeSpliceLimit)
    return JsonField(j, source).fail(fmt::format("splice {} is out of range", m.splice));
  return m;
}

Json to_json(const JudgeCallEnd& m) { return Json{{"op", "call_end"}, {"calls", m.calls}}; }

Result<JudgeCallEnd> judge_call_end_from_json(const Json& j, const std::string& source) {
  ATREX_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::open(JsonField(j, source)));
  ATREX_TRY(r.constant("op", "call_end"));
  return read_call_end(r, j, source);
}

Json to_json(const JudgeCallEndReply& m) { return Json{{"go", true}, {"check", m.check}}; }

Result<JudgeCallEndReply> judge_call_end_reply_from_json(const Json& j, const std::string& source) {
  JudgeCallEndReply m;
  ATREX_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::open(JsonField(j, source)));
  ATREX_TRY(expect_go(r));
  ATREX_TRY(r.required("check", m.check));
  ATREX_TRY(r.finish());
  return m;
}

}  // namespace atrex::runner
