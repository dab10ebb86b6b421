// ShapeRun (shape_run.h): checked calls. Outputs are poisoned before the call; after it the
// candidate's inputs and outputs go to the judge (judge_link.h), which holds the reference of
// the input set and says whether the inputs are unchanged and the outputs within tolerance.
// This process never sees a reference output.
#include "shape_run.h"

namespace atrex::runner::child {

std::optional<Failure> ShapeRun::call_and_check(ChildShapeResponse& resp, double atol, double rtol,
                                                const std::string& context,
                                                const std::function<int()>& invoke) {
  for (size_t i = 0; i < out_.size(); ++i) {
    if (auto f = device_error(initialise_output(i, out_[i]), "poisoning outputs")) return f;
  }
  if (auto f = device_error(dev_.synchronize(), "poisoning outputs")) return f;
  int rc = 0;
  {
    auto p = phases_.scope("candidate");
    rc = invoke ? invoke() : entry_(launch_->launch());
    if (auto f = device_error(dev_.synchronize(), "after the candidate call")) return f;
  }
  if (rc != 0) return Failure{EvalStatus::kWrongResult, returned_error(rc)};
  return check_outputs(resp, atol, rtol, context);
}

// The judge compares (tolerances are the judge's: the operator's or the task's, from its own
// request); the error figures, low-signal outputs and seeds of the record are the judge's too.
std::optional<Failure> ShapeRun::check_outputs(ChildShapeResponse& resp, double atol, double rtol,
                                               const std::string& context) {
  (void)resp, (void)atol, (void)rtol;
  auto phase = phases_.scope("check");
  std::vector<std::pair<const void*, size_t>> published;
  for (size_t i = 0; i < shape_.inputs.size(); ++i)
    published.emplace_back(work_in_[i], shape_.inputs[i].bytes());
  for (size_t i = 0; i < shape_.outputs.size(); ++i)
    published.emplace_back(out_[i], shape_.outputs[i].bytes());
  if (auto f = device_error(judge_.publish(dev_, published), "publishing outputs to the judge"))
    return f;
  auto verdict = judge_.check(item_.shape_id, set_seed_, set_probe_, context);
  if (!verdict) return Failure{EvalStatus::kCrashed, "judge: " + verdict.error().message};
  if (!verdict->empty()) return Failure{EvalStatus::kWrongResult, *verdict};
  return std::nullopt;
}

}  // namespace atrex::runner::child
