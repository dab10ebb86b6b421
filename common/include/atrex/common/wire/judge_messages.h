// The messages between the evaluation child and its judge (judge.h, child/judge_link.h;
// docs/evaluation.md "The judge"), typed once for both sides and read strictly: a missing, extra
// or mistyped member is an error naming it, and the judge turns any such error into a
// `tampering` verdict (the candidate runs in the child and can write anything on its pipe).
//
// child -> judge, one JSON object per line (JudgeMessage):
//   {"op":"prepare","shape_id","seed","kind","variant"}           JudgePrepare
//   {"op":"check","shape_id","seed","kind","variant","context","inputs"}   JudgeCheck
//   {"op":"inputs"}                                                JudgeInputsPublished
//   {"op":"timing_begin","shape_id"}                               JudgeTimingBegin
//   {"op":"call_begin"}                                            JudgeCallBegin
//   {"op":"call_end","calls"}                                      JudgeCallEnd
//   {"op":"timing_end"}                                            JudgeTimingEnd
//   {"op":"shape_end","shape_id","status"}                         JudgeShapeEnd
// judge -> child:
//   {"pass","error"} after a check (JudgeCheckReply); {"go":true} after timing_begin
//   (judge_go()); {"inputs":true} after a check without the inputs when the judge wants them too
//   (judge_inputs_request(), drawn after the call); {"go":true,"splice"} after call_begin
//   (JudgeCallGo); {"go":true,"check"} after call_end (JudgeCallEndReply); and, when the judge
//   stops the task, {"pass":false,"error","go":false} in place of any of them (judge_stop()).
// `kind` is usual | range_probe | edge_case (SetKind); `variant` -1, or the timed call whose
// splice the inputs carry.
//
// The bracket must hold the work, not just a call (the relay of
// kernels/faults/rms_norm_relay_empties_brackets.cpp emptied every bracket by forging the go):
//   child -> judge  {"op":"call_begin"}
//   judge -> child  {"go":true,"splice":N}          JudgeCallGo: N drawn by the judge now
//   (the child applies splice N to the call's inputs and runs the call)
//   child -> judge  {"op":"call_end","calls":n}      JudgeCallEnd
//   (the judge stamps the bracket's end, then, where the outputs live in the shared memfd's
//   arena (protocol/shared_layout.h: cpu), reads them there itself: the whole outputs, or lines
//   at places it draws now, while the child waits for the reply)
//   judge -> child  {"go":true,"check":bool}        JudgeCallEndReply
// On backends whose brackets hold the work (ChildDevice::brackets_hold_work: cpu) the call's
// inputs carry splice N, which nobody knew before the go, and what the judge read at the done is
// held against the outputs of that call when it checks it: work finished after the done (a
// thread of the candidate's racing on after the call returned) fails. Elsewhere (cuda, hip) the
// child splices by call number as before and the outputs stay on the device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "atrex/common/error.h"
#include "atrex/common/json_io.h"
#include "atrex/common/wire/eval_record.h"

namespace atrex::runner {

// Splices the judge draws are below this (kMaxVariant bounds variants).
inline constexpr int64_t kJudgeSpliceLimit = int64_t{1} << 40;

// Which input set of a shape (child/shape_run_support.h draws them, the same in the child and the
// judge): a correctness seed's (or a timing seed's) usual draw, the range probe's (some inputs
// scaled by a power of two), or the edge-case set (some inputs rewritten into the operator's edge
// cases, operator.h EdgeCase). `variant` >= 0: the usual draw with the splice of that timed call
// (splice_inputs), which changes a few values per call; -1: none.
enum class SetKind { kUsual, kRangeProbe, kEdgeCase };
const char* set_kind_name(SetKind k);
// kInvalidInput naming the field: "expected usual, range_probe or edge_case".
Result<void> read_value(const JsonField& f, SetKind& out);
struct SetKey {
  uint64_t seed = 0;
  SetKind kind = SetKind::kUsual;
  int64_t variant = -1;  // -1 <= variant < kMaxVariant
  bool operator==(const SetKey&) const = default;
};
// Timed-call variants at or above this are tampering (far more timed calls than max_iterations
// allow; the judge's splices are below it too).
inline constexpr int64_t kMaxVariant = kJudgeSpliceLimit;

struct JudgePrepare {
  std::string shape_id;
  SetKey key;
};
struct JudgeCheck {
  std::string shape_id;
  SetKey key;
  std::string context;  // the words a failure starts with ("re-check of timed call 2: ")
  bool inputs = false;  // the candidate's inputs were published ahead of the outputs
};
struct JudgeInputsPublished {};
struct JudgeTimingBegin {
  std::string shape_id;
};
struct JudgeCallBegin {};

struct JudgeCallGo {
  int64_t splice = 0;  // 0 <= splice < kJudgeSpliceLimit
};
Json to_json(const JudgeCallGo& m);
Result<JudgeCallGo> judge_call_go_from_json(const Json& j, const std::string& source);

struct JudgeCallEnd {
  int calls = 1;  // timed samples the bracket holds: 1 (eager) or a graph replay's batch
};
Json to_json(const JudgeCallEnd& m);
Result<JudgeCallEnd> judge_call_end_from_json(const Json& j, const std::string& source);

struct JudgeTimingEnd {};
struct JudgeShapeEnd {
  std::string shape_id;
  EvalStatus status = EvalStatus::kCrashed;  // what the child claims for the shape
};
using JudgeMessage = std::variant<JudgePrepare, JudgeCheck, JudgeInputsPublished, JudgeTimingBegin,
                                  JudgeCallBegin, JudgeCallEnd, JudgeTimingEnd, JudgeShapeEnd>;
Json to_json(const JudgePrepare& m);
Json to_json(const JudgeCheck& m);
Json to_json(const JudgeInputsPublished& m);
Json to_json(const JudgeTimingBegin& m);
Json to_json(const JudgeCallBegin& m);
Json to_json(const JudgeTimingEnd& m);
Json to_json(const JudgeShapeEnd& m);
// Any child -> judge message, by its "op"; kInvalidInput naming the member (an unknown op, a
// missing or extra member, a kind or variant out of range, a bracket of 0 calls).
Result<JudgeMessage> judge_message_from_json(const Json& j, const std::string& source);

struct JudgeCheckReply {
  bool pass = false;
  std::string error;  // "" when pass
};
Json to_json(const JudgeCheckReply& m);
// The judge's answer to a check: a JudgeCheckReply, or its stop (judge_stop(), pass false).
Result<JudgeCheckReply> judge_check_reply_from_json(const Json& j, const std::string& source);

struct JudgeCallEndReply {
  bool check = false;  // the judge re-checks this call: the child's next message is its check
};
Json to_json(const JudgeCallEndReply& m);
Result<JudgeCallEndReply> judge_call_end_reply_from_json(const Json& j, const std::string& source);

// The judge's request for a checked call's inputs, after a check that came without them
// (judge.cpp inputs_due_, kInputCheckOdds), and the child's answer once it has published them
// after the outputs. Both are exact: anything else in their place is tampering.
//   judge -> child  {"inputs":true}
//   child -> judge  {"op":"inputs"}
inline Json judge_inputs_request() { return Json{{"inputs", true}}; }
inline Json judge_inputs_published() { return to_json(JudgeInputsPublished{}); }
// The judge's go after timing_begin.
inline Json judge_go() { return Json{{"go", true}}; }
// What the judge answers, in place of whatever the child waits for, when it stops the task
// (tampering, or its own failure): a failed check that is no go either.
inline Json judge_stop(const std::string& why) {
  return Json{{"pass", false}, {"error", why}, {"go", false}};
}

}  // namespace atrex::runner
