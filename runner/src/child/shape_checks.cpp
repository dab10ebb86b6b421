// ShapeRun (shape_run.h): checked calls. Outputs are poisoned before the call, inputs must be
// unchanged after it, and every output is compared with the reference of the current input set
// (on the device where the backend can, else on host mirrors).
#include <algorithm>

#include "shape_run.h"

namespace atrex::runner::child {

// Host copies of the current set's pristine inputs and reference outputs, for the comparisons
// that run on the host (custom ones, backends without a device comparison, failure messages).
std::optional<Failure> ShapeRun::host_mirrors() {
  if (host_mirrors_valid_) return std::nullopt;
  host_pristine_.resize(shape_.inputs.size());
  host_ref_.resize(shape_.outputs.size());
  for (size_t i = 0; i < shape_.inputs.size(); ++i) {
    host_pristine_[i].resize(shape_.inputs[i].bytes());
    if (auto f = device_error(
            dev_.to_host(host_pristine_[i].data(), pristine_in_[i], shape_.inputs[i].bytes()),
            "copy"))
      return f;
  }
  for (size_t i = 0; i < shape_.outputs.size(); ++i) {
    host_ref_[i].resize(shape_.outputs[i].bytes());
    if (auto f = device_error(
            dev_.to_host(host_ref_[i].data(), ref_out_[i], shape_.outputs[i].bytes()), "copy"))
      return f;
  }
  host_mirrors_valid_ = true;
  return std::nullopt;
}

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

// Inputs must be unchanged and outputs within tolerance of the reference of the current input
// set. Compared on the device where the backend can (CUDA: two reduction passes, no copy);
// the host comparison runs for custom comparisons (compare.h of each operator) and to word
// the message of a failure.
std::optional<Failure> ShapeRun::check_outputs(ChildShapeResponse& resp, double atol, double rtol,
                                               const std::string& context) {
  auto phase = phases_.scope("check");
  for (size_t i = 0; i < shape_.inputs.size(); ++i) {
    const size_t bytes = shape_.inputs[i].bytes();
    bool on_device = false;
    int64_t first = -1;
    if (auto f = device_error(
            dev_.first_difference(work_in_[i], pristine_in_[i], bytes, first, on_device),
            "comparing inputs"))
      return f;
    if (on_device && first < 0) continue;
    if (auto f = host_mirrors()) return f;
    host_scratch_.resize(shape_.inputs.size());
    host_scratch_[i].resize(bytes);
    if (auto f = device_error(dev_.to_host(host_scratch_[i].data(), work_in_[i], bytes), "copy"))
      return f;
    auto diff =
        first_byte_difference(shape_.inputs[i], host_scratch_[i].data(), host_pristine_[i].data());
    if (!diff.empty())
      return Failure{EvalStatus::kWrongResult, context + "the candidate modified its input " +
                                                   diff + "; inputs are read-only"};
  }
  std::vector<std::optional<problems::CompareResult>> passed(shape_.outputs.size());
  bool need_host = false;
  const std::vector<const void*> dev_out(out_.begin(), out_.end()),
      dev_ref(ref_out_.begin(), ref_out_.end());
  for (size_t i = 0; i < shape_.outputs.size(); ++i) {
    problems::CompareResult c;
    bool on_device = false;
    const Status compared =
        shape_.def->outputs[i].compare
            ? dev_.compare_custom(shape_, i, dev_out, dev_ref, atol, rtol, c, on_device)
            : dev_.compare(shape_.outputs[i], out_[i], ref_out_[i], atol, rtol, c, on_device);
    if (auto f = device_error(compared, "comparing outputs")) return f;
    if (on_device && c.pass)
      passed[i] = c;
    else
      need_host = true;
  }
  if (need_host) {
    if (auto f = host_mirrors()) return f;
    host_out_.resize(shape_.outputs.size());
    for (size_t i = 0; i < shape_.outputs.size(); ++i) {
      host_out_[i].resize(shape_.outputs[i].bytes());
      if (auto f = device_error(
              dev_.to_host(host_out_[i].data(), out_[i], shape_.outputs[i].bytes()), "copy"))
        return f;
    }
  }
  std::vector<const void*> cand, ref, in;  // empty when every output passed on the device
  for (auto& b : host_out_) cand.push_back(b.data());
  for (auto& b : host_ref_) ref.push_back(b.data());
  for (auto& b : host_pristine_) in.push_back(b.data());
  for (size_t i = 0; i < shape_.outputs.size(); ++i) {
    const auto custom = shape_.def->outputs[i].compare;
    problems::CompareResult c =
        passed[i] ? *passed[i]
        : custom  ? custom(shape_, i, cand, ref, in, atol, rtol)
                  : problems::compare_output(shape_.outputs[i], cand[i], ref[i], atol, rtol);
    resp.max_abs_error = std::max(resp.max_abs_error, c.max_abs_error);
    resp.max_rel_error = std::max(resp.max_rel_error, c.max_rel_error);
    if (c.low_signal) {
      auto& ls = resp.low_signal_outputs;
      if (std::find(ls.begin(), ls.end(), shape_.outputs[i].name) == ls.end())
        ls.push_back(shape_.outputs[i].name);
    }
    if (!c.pass) return Failure{EvalStatus::kWrongResult, context + c.message};
  }
  return std::nullopt;
}

}  // namespace atrex::runner::child
