// A task's shapes through evaluation children (evaluator.h): in as few child processes as
// isolation allows, and what to record when a child ends without a verdict (runner-private).
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "atrex/common/error.h"
#include "atrex/common/wire/eval_record.h"
#include "atrex/problems/suite.h"
#include "atrex/common/wire/child_protocol.h"
#include "sandbox/eval_sandbox.h"

namespace atrex::runner {

// One shape to evaluate: its request (seeds and gate options filled in) and whether it is one of
// the task's own shapes (counted in messages) or an unseen-shape check.
struct BatchItem {
  const problems::Shape* shape = nullptr;
  ChildShape request;
  bool own = true;
};

struct BatchContext {
  const EvalTask* task = nullptr;
  std::filesystem::path library;    // the compiled candidate
  std::string device_name;          // for records the child wrote none of
  std::filesystem::path child_dir;  // atrex-eval-* live here
  std::filesystem::path work_dir;   // request/response files, crash logs
  int device_index = 0;
  uint64_t file_tag = 0;  // makes the request files' names unique
  const std::atomic<bool>* stop = nullptr;
  EvalSandbox sandbox;  // the mode was checked usable (probe_bwrap) by the evaluator
};

// Evaluates `items` in order: one child takes them all; a crash or a timeout ends it, that shape
// is recorded as such (crashed: the child died, with its output's tail; timeout: no verdict
// within shape_timeout_s, restarted by every verdict), and a fresh child takes the rest. Once
// `abandon` returns a reason, the shapes not evaluated yet are recorded wrong_result with it.
// Each child gets its request on an inherited memfd and writes its verdicts to an inherited
// pipe, checked by a ResponseChannel (response_channel.h); a tampered channel makes every shape
// of the task `rejected` ("tampering: ..."). `emit` gets the records of the task's own shapes
// once the batch ends (so that tampering found late still decides every shape), those of
// unseen shapes as they come (they decide whether the rest is evaluated). kUnavailable after a
// stop request (between shapes, the records so far emitted); kIo when the request cannot be
// passed on.
Result<void> run_shape_batch(const BatchContext& ctx, const std::vector<BatchItem>& items,
                             const std::function<void(EvalRecord, const problems::Shape&)>& emit,
                             const std::function<std::string()>& abandon);

// A child's verdict on one shape as the record's fields.
void apply_child_response(EvalRecord& r, const ChildShapeResponse& c);

// The judge's verdict on the same shape (nullptr: none came) folded into `r` (filled by
// apply_child_response): `ok` needs the child's and the judge's, the error figures, seeds and
// range probe are the judge's, the claimed timing is held against the judge's clock
// (timing_check.h: `rejected` when refuted). Returns why the task is tampering ("" when it is
// not): the child claims ok where the judge did not see it pass every check, told the judge
// another status, or reports other timed samples than the judge bracketed.
std::string judge_record(EvalRecord& r, const ChildShapeResponse& c, const JudgeVerdict* j);

}  // namespace atrex::runner
