#include "unseen_check.h"

#include <fmt/format.h>

namespace atrex::runner {

ChildShape UnseenCheck::item(const problems::Shape& shape, uint64_t seed) {
  return ChildShape{shape.id,
                    shape.params,
                    {seed},
                    /*performance=*/false,
                    /*range_probe=*/false,
                    /*stop_task_on_failure=*/true,
                    /*edge_cases=*/false};
}

bool UnseenCheck::absorb(const EvalRecord& r) {
  const problems::UnseenShape* u = nullptr;
  for (const auto& s : shapes_) {
    if (s.shape.id == r.shape_id) u = &s;
  }
  if (!u) return false;
  if (!failure_.empty()) return true;  // not run: the task was decided by an earlier one
  results_.push_back(
      UnseenShapeResult{u->describe(), u->base_shape_id, u->shape.params, r.status, r.error});
  // A wrong answer, a crash or a hang on a valid shape of the operator is a wrong candidate, and
  // so is a rejection: an out-of-bounds write, a tampered channel, an impossible speed are the
  // candidate's doing (attack round 3: a hot-shapes-only kernel earned `rejected` on the unseen
  // shapes at will with a write past its output, and the task's shapes stayed `ok`). A compile
  // error, or a rejection that is the runner's (no device for the backend), holds for the task's
  // own shapes too, which say so themselves (decorate keeps a hot shape's own rejection).
  const bool failed = r.status == EvalStatus::kWrongResult || r.status == EvalStatus::kCrashed ||
                      r.status == EvalStatus::kTimeout || r.status == EvalStatus::kRejected;
  if (failed && failure_.empty()) {
    failure_status_ = r.status;
    failure_ = fmt::format(
        "fails on an unseen shape, {} (checked besides the hot shapes: a free dimension set to a "
        "value no hot shape has): {}{}{}",
        u->describe(), eval_status_name(r.status), r.error.empty() ? "" : ": ", r.error);
  }
  return true;
}

void UnseenCheck::decorate(EvalRecord& r) const {
  r.unseen_shapes = results_;
  // A hot shape's own rejection (a tampered result channel, shape_batch.h; no device for the
  // backend) decides its record above the unseen shapes' verdict.
  if (failure_.empty() || r.status == EvalStatus::kRejected) return;
  r.status = failure_status_;
  r.error = failure_;
  r.timing.reset();
  r.s_j.reset();
}

}  // namespace atrex::runner
