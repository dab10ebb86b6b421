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
#include "protocol/child_protocol.h"
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
    return initialise_output(i, buffer, pristine_in_);
  }
  Status initialise_output(size_t i, void* buffer, const std::vector<void*>& inputs);
  // A device error (a crash of the context) as the `crashed` verdict, naming `where`.
  std::optional<Failure> device_error(const Status& status, const char* where);
  // Fresh inputs for `seed` in the work buffers, and pristine copies to restore them from (the
  // timed calls' input rotation); `range_probe`: the operator's probed inputs scaled
  // (check_range_probe). No reference runs here: the judge has its own (judge.h).
  std::optional<Failure> prepare_seed(uint64_t seed, bool range_probe = false);
  std::optional<Failure> check_range_probe(ChildShapeResponse& resp, double atol, double rtol,
                                           uint64_t seed);
  std::string returned_error(int rc);

  // --- shape_checks.cpp
  // Poisons outputs, calls the candidate once, and has the judge check outputs and inputs.
  std::optional<Failure> call_and_check(ChildShapeResponse& resp, double atol, double rtol,
                                        const std::string& context,
                                        const std::function<int()>& invoke = {});
  std::optional<Failure> check_outputs(ChildShapeResponse& resp, double atol, double rtol,
                                       const std::string& context);

  // --- shape_measure.cpp
  void swap_input_sets();
  bool prepare_second_input_set(ChildShapeResponse& resp);
  std::optional<Failure> measure(ChildShapeResponse& resp, double atol, double rtol);
  std::optional<Failure> recheck_after_timing(ChildShapeResponse& resp, double atol, double rtol,
                                              bool rotate, bool graph);

  const ChildTaskRequest& task_;
  const ChildShape& item_;
  ChildDevice& dev_;
  CandidateLoader& loader_;
  JudgeLink& judge_;
  Buffers buffers_;
  problems::ResolvedShape shape_;
  AtrexCandidateRunFn entry_ = nullptr;
  AtrexCandidateErrorFn error_fn_ = nullptr;
  std::unique_ptr<LaunchBuilder> launch_;
  PhaseClock phases_;
  // The second input set of the timed calls (see measure).
  std::vector<void*> alt_pristine_in_;
  std::optional<Failure> rotation_failure_;
  std::string second_set_error_;
  std::vector<void*> work_in_, pristine_in_, out_;
  // The input set in pristine_in_ (and alt_pristine_in_), as the judge knows it: its seed and
  // whether the range probe scaled it.
  uint64_t set_seed_ = 0, alt_set_seed_ = 0;
  bool set_probe_ = false, alt_set_probe_ = false;
};

}  // namespace atrex::runner::child
