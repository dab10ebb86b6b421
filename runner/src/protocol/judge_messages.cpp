#include "protocol/judge_messages.h"

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

}  // namespace

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

Json to_json(const JudgeCallEnd& m) {
  return Json{{"op", "call_end"}, {"calls", m.calls}};
}

Result<JudgeCallEnd> judge_call_end_from_json(const Json& j, const std::string& source) {
  JudgeCallEnd m;
  ATREX_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::open(JsonField(j, source)));
  ATREX_TRY(r.constant("op", "call_end"));
  ATREX_TRY(r.required("calls", m.calls));
  ATREX_TRY(r.finish());
  if (m.calls < 1 || m.calls > 100000)
    return JsonField(j, source).fail(fmt::format("a bracket of {} calls", m.calls));
  return m;
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
