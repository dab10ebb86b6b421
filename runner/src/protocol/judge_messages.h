// The messages between the evaluation child and its judge that bracket one timed call (judge.h,
// child/judge_link.h; docs/evaluation.md "The judge"), typed once for both sides and read
// strictly: a missing, extra or mistyped member is an error naming it (the judge turns it into a
// `tampering` verdict). The other messages of that pipe are described in judge_link.h.
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
#include <vector>

#include "atrex/common/error.h"
#include "atrex/common/json_io.h"

namespace atrex::runner {

// Splices the judge draws are below this (shape_run_support.h kMaxVariant bounds variants).
inline constexpr int64_t kJudgeSpliceLimit = int64_t{1} << 40;

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
inline Json judge_inputs_published() { return Json{{"op", "inputs"}}; }


}  // namespace atrex::runner
