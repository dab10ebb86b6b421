// The unseen-shape check of one task (docs/evaluation.md "Unseen shapes"): a few shapes the
// suite does not hold (problems/unseen.h), evaluated for correctness before the task's shapes
// in the same child. Their results never become records of their own; they are listed in every
// record of the task, and a failure on one (wrong_result, crashed, timeout) gives every shape of
// the task that status, with the unseen shape named in the error.
#pragma once

#include <string>
#include <vector>

#include "atrex/common/wire/eval_record.h"
#include "atrex/problems/unseen.h"
#include "atrex/common/wire/child_protocol.h"

namespace atrex::runner {

class UnseenCheck {
 public:
  UnseenCheck() = default;
  explicit UnseenCheck(std::vector<problems::UnseenShape> shapes) : shapes_(std::move(shapes)) {}

  const std::vector<problems::UnseenShape>& shapes() const { return shapes_; }
  // The child request of an unseen shape: one seed, correctness only, no range probe, and the
  // child stops the task when it fails (child_runner.h).
  static ChildShape item(const problems::Shape& shape, uint64_t seed);

  // The record of an unseen shape is taken here (true); any other record is left alone (false).
  bool absorb(const EvalRecord& r);
  // Lists the checks in a record of the task's own shapes and, after a failed one, gives the
  // record its status and reason.
  void decorate(EvalRecord& r) const;
  // Why the task's shapes are wrong ("" while no unseen shape failed).
  const std::string& failure() const { return failure_; }

 private:
  std::vector<problems::UnseenShape> shapes_;
  std::vector<UnseenShapeResult> results_;
  std::string failure_;
  EvalStatus failure_status_ = EvalStatus::kWrongResult;
};

}  // namespace atrex::runner
