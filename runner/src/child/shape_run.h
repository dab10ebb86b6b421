// One shape's evaluation inside the child (child_runner.h): load the candidate, the correctness
// gate on fresh seeds, then the performance gate. The class is split by responsibility:
//   shape_run.cpp      loading, allocation, seeds (inputs and reference), the gate sequence
//   shape_checks.cpp   checked calls: poisoned outputs, unchanged inputs, output comparison
//   shape_measure.cpp  the performance gate and the re-checks around timing
//   kernel_checks.cpp  what the CUPTI traces of the timed calls say (kernel sets, attribution)
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "atrex/candidate.h"
#include "child_device.h"
#include "judge_link.h"
#include "launch.h"
#include "loader.h"
#include "atrex/common/wire/child_protocol.h"
#include "shape_run_support.h"

namespace atrex::runner::child {

class ShapeRun {
 public:
  ShapeRun(const ChildTaskRequest& task, const ChildShape& item, ChildDevice& dev,
           CandidateLoader& loader, JudgeLink& judge)
      : task_(task), item_(item), dev_(dev), loader_(loader), judge_(judge), buffers_(dev) {}

  // The response (atrex.child-response/1) for the item's shape; never throws.
  ChildShapeResponse run();

 private:
  // --- shape_run.cpp
  std::optional<Failure> execute(ChildShapeResponse& resp);
  std::optional<Failure> allocate();
  // Puts output i in its pre-call state: a copy of its `initial_from` input (in-place
  // semantics), else poison (0xFF bytes: NaN for floats) so unwritten elements fail.
  Status initialise_output(size_t i, void* buffer) {
    return initialise_output(i, buffer, *current_pristine_);
  }
  Status initialise_output(size_t i, void* buffer, const std::vector<void*>& inputs);
  // A device error (a crash of the context) as the `crashed` verdict, naming `where`.
  std::optional<Failure> device_error(const Status& status, const char* where);
  // Fresh inputs for input set `key` in the work buffers, and pristine copies to restore them
  // from; the range probe's set has the operator's probed inputs scaled (check_range_probe),
  // the edge-case set its rewritten inputs (check_edge_cases). No reference runs here: the judge
  // has its own (judge.h).
  std::optional<Failure> prepare_seed(const SetKey& key);
  std::optional<Failure> check_range_probe(ChildShapeResponse& resp, double atol, double rtol,
                                           uint64_t seed);
  std::optional<Failure> check_edge_cases(ChildShapeResponse& resp, double atol, double rtol,
                                          uint64_t seed);
  std::string returned_error(int rc);

  // --- shape_checks.cpp
  // Poisons outputs, calls the candidate once, and has the judge check outputs and inputs.
  std::optional<Failure> call_and_check(ChildShapeResponse& resp, double atol, double rtol,
                                        const std::string& context,
                                        const std::function<int()>& invoke = {});
  std::optional<Failure> check_outputs(ChildShapeResponse& resp, double atol, double rtol,
                                       const std::string& context);
  // Guard regions (docs/evaluation.md "Guard regions"): kGuardBytes of a seeded canary right
  // before and right after every output buffer, written once when the buffers are allocated.
  // check_guards compares them with the canary after a call (checked or timed; outside the
  // timed window): a write past the end or before the start of an output is `rejected`, naming
  // the output, the side and how far out the first changed byte lies. `when` says which call.
  Status fill_guards();
  std::optional<Failure> check_guards(const std::string& when);

  // --- shape_measure.cpp
  // Draws the rotation's sets 1.. (set 0 is the last correctness seed's, in pristine_in_);
  // how many there are is in the response (input_rotation).
  std::optional<Failure> prepare_rotation(ChildShapeResponse& resp);
  // Timed call `t`'s inputs: set t % sets copied into the work buffers and spliced
  // (splice_inputs, variant t); outputs reset from them. key_ names that set. Where the
  // brackets hold the work (ChildDevice::brackets_hold_work) the splice waits for the judge's go
  // (begin_timed_call) and key_'s variant is set there.
  Status prepare_timed_call(int64_t t);
  // The timing hooks around each eager timed call (ChildDevice::set_timing_hooks): the judge's
  // go, then (brackets that hold the work) the splice it names applied to the work inputs and
  // to the in-place outputs that start from them; after the call, the done (the judge reads the
  // outputs in its arena before it answers). An error of the splice sticks in hook_error_.
  void begin_timed_call();
  void end_timed_call();
  // Whether input i's work buffer is held twice in a row for the window splice
  // (shape_run_support.h window_spliced, on a backend whose brackets hold the work).
  bool windowed(size_t i) const {
    return dev_.brackets_hold_work() && item_.performance && window_spliced(shape_, i);
  }
  // Points every windowed input back at the start of its work buffer (the unspliced set), in
  // work_in_ and in the launch.
  void reset_windows();
  // Copies rotation set `k` (unspliced) into the work buffers; key_ names it.
  std::optional<Failure> restore_rotation_set(int k);
  // The judge asked to re-check the timed call just made: its outputs as they are.
  std::optional<Failure> recheck_timed_call(ChildShapeResponse& resp, int64_t t);
  std::optional<Failure> measure(ChildShapeResponse& resp, double atol, double rtol);
  std::optional<Failure> recheck_after_timing(ChildShapeResponse& resp, double atol, double rtol,
                                              bool graph);

  const ChildTaskRequest& task_;
  const ChildShape& item_;
  ChildDevice& dev_;
  CandidateLoader& loader_;
  JudgeLink& judge_;
  Buffers buffers_;
  problems::ResolvedShape shape_;
  AtrexCandidateRunFn entry_ = nullptr;
  AtrexCandidateErrorFn error_fn_ = nullptr;
  bool python_ = false;  // a Python module through the embedding layer (loader.h)
  // Whether the next check publishes the inputs ahead of the outputs: the shape's first check,
  // the first after timing and a re-checked timed call (the judge's rule, judge.cpp
  // inputs_due_; at other checks the judge may ask for them after the call).
  bool inputs_due_ = true;
  std::unique_ptr<LaunchBuilder> launch_;
  PhaseClock phases_;
  // The timed calls' input sets (see measure): rotation_in_[0] is pristine_in_ (the last
  // correctness seed's set), the others are allocated when the shape is timed; rotation_keys_
  // their seeds. rotation_error_: why fewer sets than rotation_sets() were allocated.
  std::vector<std::vector<void*>> rotation_in_;
  std::vector<SetKey> rotation_keys_;
  std::string rotation_error_;
  // work_in_: what the candidate's launch points at (a windowed input's view into its
  // work_base_ buffer of twice its size during a timed call, else the buffer's start).
  std::vector<void*> work_in_, work_base_, pristine_in_, out_;
  // Per output: the guard before it and the guard after it (device buffers, kGuardBytes each);
  // the canary they hold, on the device (guard_canary_) and on the host.
  std::vector<std::pair<void*, void*>> guards_;
  void* guard_canary_ = nullptr;
  std::vector<uint8_t> guard_canary_host_, guard_scratch_;
  // The input set in the work buffers, as the judge knows it (checks name it), and its
  // pristine copy (in-place outputs start from it).
  SetKey key_;
  const std::vector<void*>* current_pristine_ = &pristine_in_;
  std::string hook_error_;  // the first error of begin_timed_call ("" while none)
};

}  // namespace atrex::runner::child
