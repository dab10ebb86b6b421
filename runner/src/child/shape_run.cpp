// ShapeRun (shape_run.h): loading the candidate, allocation, the seeds' inputs and references,
// and the order of the gates.
#include "shape_run.h"

#include <fmt/format.h>

namespace atrex::runner::child {

ChildShapeResponse ShapeRun::run() {
  ChildShapeResponse resp;
  resp.shape_id = item_.shape_id;
  resp.device = dev_.name();
  auto failure = execute(resp);
  resp.status = failure ? failure->status : EvalStatus::kOk;
  resp.error = failure ? failure->error : "";
  resp.phases_s = phases_.to_json();
  if (resp.clocks.empty()) resp.clocks = dev_.clocks();
  return resp;
}

std::optional<Failure> ShapeRun::execute(ChildShapeResponse& resp) {
  // --- shape and candidate
  const auto* def = problems::find_native_operator(task_.operator_name);
  if (!def) {
    return Failure{EvalStatus::kRejected,
                   "operator has no native definition: " + task_.operator_name};
  }
  problems::Shape shape;
  shape.id = item_.shape_id;
  shape.params = item_.params;
  auto resolved = problems::resolve_shape(*def, shape);
  if (!resolved) return Failure{EvalStatus::kRejected, resolved.error().message};
  shape_ = std::move(*resolved);
  auto loaded = loader_.load(task_.library);
  if (!loaded) {
    return Failure{loaded.error().code == ErrorCode::kNotFound ? EvalStatus::kRejected
                                                               : EvalStatus::kCompileError,
                   loaded.error().message};
  }
  entry_ = loaded->run;
  error_fn_ = loaded->error_message;
  python_ = loaded->python;
  if (loaded->set_inplace) {
    // Outputs that start as an input's values stand in for that input in forward's arguments.
    std::vector<int> outs, ins;
    for (size_t o = 0; o < def->outputs.size(); ++o) {
      const std::string& from = def->outputs[o].initial_from;
      if (from.empty()) continue;
      for (size_t i = 0; i < def->inputs.size(); ++i) {
        if (def->inputs[i].name != from) continue;
        outs.push_back(static_cast<int>(o));
        ins.push_back(static_cast<int>(i));
      }
    }
    loaded->set_inplace(outs.data(), ins.data(), static_cast<int>(outs.size()));
  }
  {
    auto p = phases_.scope("setup");
    if (auto f = allocate()) return f;
    dev_.trim();  // buffers cached from the previous shape and not reused
  }
  launch_ = std::make_unique<LaunchBuilder>(shape_, dev_.dl_device(), dev_.stream());
  for (size_t i = 0; i < work_in_.size(); ++i) launch_->set_input(i, work_in_[i]);
  for (size_t i = 0; i < out_.size(); ++i) launch_->set_output(i, out_[i]);

  // --- correctness gate: every seed draws fresh inputs
  const auto& seeds = item_.seeds;
  ATREX_ASSERT(!seeds.empty(), "the protocol reader refuses a shape without seeds");
  const double atol = def->atol.value_or(task_.atol);
  const double rtol = def->rtol.value_or(task_.rtol);
  // The range probe runs after the first seed, so a candidate that is simply wrong fails on
  // the usual inputs first and the timed calls start from a usual seed's inputs.
  // The edge-case set follows it, for the same reason.
  const bool probe = def->range_probe.enabled() && item_.range_probe;
  const bool edge = !def->edge_cases.empty() && item_.edge_cases;
  const bool performance = item_.performance;
  for (size_t k = 0; k < seeds.size(); ++k) {
    if (auto f = prepare_seed(SetKey{seeds[k]})) return f;
    if (auto f = call_and_check(resp, atol, rtol, "")) return f;
    ++resp.seeds_passed;
    if (k != 0) continue;
    if (probe) {
      if (auto f = check_range_probe(resp, atol, rtol, seeds[0])) return f;
    }
    if (edge) {
      if (auto f = check_edge_cases(resp, atol, rtol, seeds[0])) return f;
    }
    if ((probe || edge) && seeds.size() == 1 && performance) {
      if (auto f = prepare_seed(SetKey{seeds[0]})) return f;
    }
  }
  if (!performance) return std::nullopt;
  auto measured = measure(resp, atol, rtol);
  // No target DSL compiles for the CPU (Triton, Gluon, CuteDSL and FlyDSL target GPUs): a Python
  // candidate timed on the cpu backend is a PyTorch fallback by construction.
  if (!measured && python_ && dev_.dl_device().device_type == kDLCPU) resp.dsl_share = 0.0;
  return measured;
}

// One more checked call on inputs drawn as for `seed` (mixed, so not the seed's own values) with
// the operator's probed inputs multiplied by 2^exponent (operator.h RangeProbe): intermediates
// of the operator leave the fp16 range, so a candidate that computes in fp16 where the
// operator's policy is fp32 accumulates to inf (or NaN) and fails.
std::optional<Failure> ShapeRun::check_range_probe(ChildShapeResponse& resp, double atol,
                                                   double rtol, uint64_t seed) {
  const auto& probe = shape_.def->range_probe;
  std::string inputs;
  for (const auto& name : probe.inputs) inputs += (inputs.empty() ? "" : ", ") + name;
  const std::string what = fmt::format("{} scaled by 2^{}", inputs, probe.exponent);
  if (auto f = prepare_seed(SetKey{seed ^ kRangeProbeSeedMix, SetKind::kRangeProbe})) return f;
  const std::string context = fmt::format(
      "range probe ({}: sums and products leave the fp16 range, the operator's fp32 arithmetic "
      "holds them; computing in a narrower type fails here): ",
      what);
  if (auto f = call_and_check(resp, atol, rtol, context)) return f;
  resp.range_probe = what;
  return std::nullopt;
}

// One more checked call on inputs drawn as for `seed` (mixed) and then rewritten into the
// operator's edge cases (operator.h EdgeCase: ties at the k-th value, all-zero rows, empty
// experts, permuted block tables and slot mappings, partial last blocks). Random draws never
// produce them, so a candidate that takes a shortcut there (keeps exactly k values on a tie,
// reads block s * max_blocks + j instead of the table) passes every seed and fails here.
std::optional<Failure> ShapeRun::check_edge_cases(ChildShapeResponse& resp, double atol,
                                                  double rtol, uint64_t seed) {
  const std::string what = edge_case_description(*shape_.def);
  if (auto f = prepare_seed(SetKey{seed ^ kEdgeCaseSeedMix, SetKind::kEdgeCase})) return f;
  if (auto f = call_and_check(resp, atol, rtol, "edge case (" + what + "): ")) return f;
  resp.edge_case = what;
  return std::nullopt;
}

std::optional<Failure> ShapeRun::allocate() {
  auto take = [&](size_t bytes, std::vector<void*>& into,
                  const char* what) -> std::optional<Failure> {
    auto p = buffers_.alloc(bytes);
    if (!p)
      return Failure{EvalStatus::kCrashed,
                     fmt::format("allocating {}: {}", what, p.error().message)};
    into.push_back(*p);
    return std::nullopt;
  };
  // With the judge's device arena (judge_link.h), the work inputs and the guarded outputs live
  // there (shared_layout.h device_arena_layout), where the judge compares them itself.
  uint8_t* const arena = judge_.device_arena();  // the judge's device arena, or nullptr
  const DeviceArenaLayout arena_layout = arena ? device_arena_layout(shape_) : DeviceArenaLayout{};
  if (arena && arena_layout.total > judge_.device_arena_bytes())
    return Failure{EvalStatus::kCrashed,
                   fmt::format("the judge's device arena holds {} bytes, shape {} needs {}",
                               judge_.device_arena_bytes(), item_.shape_id, arena_layout.total)};
  for (size_t i = 0; i < shape_.inputs.size(); ++i) {
    const size_t bytes = shape_.inputs[i].bytes();
    if (arena) {
      ATREX_ASSERT(!windowed(i), "the device arena is never offered where brackets hold the work");
      work_in_.push_back(arena + arena_layout.input[i]);
    } else if (auto f = take(windowed(i) ? 2 * bytes : bytes, work_in_, "inputs")) {
      return f;
    }
    if (auto f = take(bytes, pristine_in_, "inputs")) return f;
  }
  work_base_ = work_in_;
  // Each output sits between two guard regions (check_guards): on a backend whose brackets hold
  // the work (cpu), in the shared memfd's output arena (protocol/shared_layout.h), where the
  // judge reads the outputs itself at every timed call's done; elsewhere in one allocation each.
  if (dev_.host_memory() && dev_.brackets_hold_work()) {
    const SharedLayout layout = shared_layout(shape_);
    auto memfd_arena = judge_.output_arena(dev_, layout);
    if (!memfd_arena)
      return Failure{EvalStatus::kCrashed,
                     "allocating outputs in the judge's arena: " + memfd_arena.error().message};
    for (size_t i = 0; i < shape_.outputs.size(); ++i) {
      uint8_t* at = *memfd_arena + layout.output[i];
      out_.push_back(at);
      guards_.emplace_back(at - kGuardBytes, at + shape_.outputs[i].bytes());
    }
  } else if (arena) {
    for (size_t i = 0; i < shape_.outputs.size(); ++i) {
      uint8_t* at = arena + arena_layout.output[i];
      out_.push_back(at);
      guards_.emplace_back(at - kGuardBytes, at + shape_.outputs[i].bytes());
    }
  } else {
    std::vector<void*> whole;
    for (const auto& d : shape_.outputs) {
      if (auto f = take(d.bytes() + 2 * kGuardBytes, whole, "outputs")) return f;
      auto* base = static_cast<uint8_t*>(whole.back());
      out_.push_back(base + kGuardBytes);
      guards_.emplace_back(base, base + kGuardBytes + d.bytes());
    }
  }
  {
    std::vector<void*> canary;
    if (auto f = take(kGuardBytes, canary, "the guard canary")) return f;
    guard_canary_ = canary.front();
  }
  if (auto f = device_error(fill_guards(), "writing the guard regions")) return f;
  // The timed calls' other input sets (measure), as many as rotation_sets() allows and the
  // device has room for; with fewer than two sets the rotation is off, said so in the response.
  rotation_in_.push_back(pristine_in_);
  if (item_.performance) {
    const int wanted = rotation_sets(shape_);
    while (static_cast<int>(rotation_in_.size()) < wanted && rotation_error_.empty()) {
      std::vector<void*> set;
      for (const auto& d : shape_.inputs) {
        auto p = buffers_.alloc(d.bytes());
        if (!p) {
          rotation_error_ = p.error().message;
          break;
        }
        set.push_back(*p);
      }
      if (rotation_error_.empty()) rotation_in_.push_back(std::move(set));
    }
    // Clears a recoverable out-of-memory error; a sticky one shows at the next checked step.
    if (!rotation_error_.empty()) (void)dev_.synchronize();  // the error is the one above
  }
  return std::nullopt;
}

Status ShapeRun::initialise_output(size_t i, void* buffer, const std::vector<void*>& inputs) {
  const std::string& from = shape_.def->outputs[i].initial_from;
  if (!from.empty()) {
    for (size_t k = 0; k < shape_.inputs.size(); ++k) {
      if (shape_.inputs[k].name == from) {
        return dev_.copy(buffer, inputs[k], shape_.outputs[i].bytes());
      }
    }
    return internal_error("output " + shape_.outputs[i].name + " starts from unknown input " +
                          from);
  }
  return dev_.fill(buffer, 0xFF, shape_.outputs[i].bytes());
}

std::optional<Failure> ShapeRun::device_error(const Status& status, const char* where) {
  if (status) return std::nullopt;
  return Failure{EvalStatus::kCrashed, fmt::format("{}: {}", where, status.error().message)};
}

void ShapeRun::reset_windows() {
  for (size_t i = 0; i < work_in_.size(); ++i) {
    if (work_in_[i] == work_base_[i]) continue;
    work_in_[i] = work_base_[i];
    if (launch_) launch_->set_input(i, work_in_[i]);
  }
}

std::optional<Failure> ShapeRun::prepare_seed(const SetKey& key) {
  if (auto told = judge_.prepare(item_.shape_id, key); !told)
    return Failure{EvalStatus::kCrashed, "judge: " + told.error().message};
  reset_windows();
  {
    auto phase = phases_.scope("inputs");
    for (size_t i = 0; i < shape_.inputs.size(); ++i) {
      if (auto f =
              device_error(draw_input(dev_, shape_, i, key, pristine_in_[i]), "generating inputs"))
        return f;
      if (auto f = device_error(dev_.copy(work_in_[i], pristine_in_[i], shape_.inputs[i].bytes()),
                                "copying inputs"))
        return f;
    }
    if (auto f = device_error(dev_.synchronize(), "generating inputs")) return f;
  }
  key_ = key;
  current_pristine_ = &pristine_in_;
  return std::nullopt;
}

std::string ShapeRun::returned_error(int rc) {
  const char* msg = error_fn_ ? error_fn_() : nullptr;
  return fmt::format("the candidate returned {}{}{}", rc, msg ? ": " : "", msg ? msg : "");
}

}  // namespace atrex::runner::child
