// Evaluator (evaluator.h): the order of the gates for one task. Where candidates run is
// environment.cpp's, the children's orchestration shape_batch.cpp's, T_roofline problems'.
#include "atrex/runner/evaluator.h"

#include <unistd.h>

#include <random>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "atrex/common/clock.h"
#include "atrex/common/process/sandbox.h"
#include "atrex/common/text.h"
#include "atrex/problems/numeric.h"
#include "atrex/problems/operator.h"
#include "atrex/problems/roofline.h"
#include "atrex/problems/unseen.h"
#include "shape_batch.h"
#include "unseen_check.h"

namespace atrex::runner {
namespace fs = std::filesystem;

namespace {

// Correctness seed k of a shape: fresh per (evaluator, task, shape), unknown to the candidate.
uint64_t shape_seed(uint64_t base, const EvalTask& task, const std::string& shape_id, int k) {
  const uint64_t b = num::mix64(base ^ std::hash<std::string>{}(task.task_id + "/" + shape_id));
  return num::mix64(b + static_cast<uint64_t>(k));
}

}  // namespace

Evaluator::Evaluator(EvaluatorOptions options)
    : options_(std::move(options)), cache_(options_.cache_dir, options_.include_dir) {
  seed_base_ = options_.seed ? *options_.seed
                             : std::random_device{}() * 0x100000001ull ^ std::random_device{}();
  // The compiler reads and writes what the candidate's source says: it runs in the sandbox too.
  if (options_.sandbox == SandboxMode::kBwrap) cache_.sandbox_with(bwrap_program(options_.child_dir));
  if (options_.work_dir.empty()) {
    options_.work_dir = fs::temp_directory_path() / fmt::format("atrex-eval-{}", ::getpid());
    own_work_dir_ = true;
  }
}

Evaluator::~Evaluator() {
  // Request and log files of children are removed as they end; what is left (the log of a
  // crashed child) is in its record's error already.
  if (own_work_dir_) {
    std::error_code ec;
    fs::remove_all(options_.work_dir, ec);
  }
}

Status sandbox_ready(SandboxMode mode, const fs::path& child_dir) {
  if (mode == SandboxMode::kNone) return ok();
  return probe_bwrap(bwrap_program(child_dir));
}

namespace {

// The lowest T_roofline (us) the shape's traffic allows: the released counts over-count some
// operators (whole caches read and written where the kernel touches a few rows), so a kernel can
// honestly beat the released T_roofline by far; the analytic counts are the minimum traffic.
double lowest_roofline_us(const problems::Suite& suite, const std::string& op,
                          const problems::Shape& shape, const problems::HardwareProfile& hw,
                          double scored_us) {
  auto counts = problems::roofline_counts(suite, op, shape, RooflineSource::kAnalytic);
  if (!counts) return scored_us;
  auto t = problems::roofline_time(*counts, hw);
  return t ? std::min(scored_us, t->roofline_s * 1e6) : scored_us;
}

}  // namespace

void Evaluator::finish_record(EvalRecord& r, const EvalSettings& settings,
                              const problems::Shape& shape) {
  // The error text is the candidate's (its message, its output, the compiler's diagnostics of
  // its source): no control character of it reaches a terminal or a report.
  r.error = printable_text(std::move(r.error));
  for (auto& u : r.unseen_shapes) u.error = printable_text(std::move(u.error));
  r.hardware = options_.hardware.name;
  r.runner = options_.runner;
  r.sandbox = options_.sandbox;
  r.created_at = utc_timestamp_now();
  auto counts =
      problems::roofline_counts(*options_.suite, r.operator_name, shape, settings.roofline);
  if (!counts) {
    spdlog::warn("roofline for {} shape {}: {}", r.operator_name, shape.id, counts.error().message);
    return;
  }
  auto t = problems::roofline_time(*counts, options_.hardware);
  if (!t) {
    spdlog::warn("roofline for {} shape {}: {}", r.operator_name, shape.id, t.error().message);
    return;
  }
  r.t_roofline_us = t->roofline_s * 1e6;
  if (r.status != EvalStatus::kOk || !r.timing || r.timing->n == 0) return;
  const auto& tm = *r.timing;
  auto s = problems::score_shape(r.t_roofline_us, tm.time_us_median, tm.time_us_p75);
  r.above_roofline = s.above_roofline;
  // Impossible is judged against the lowest roofline the traffic allows, not the scored one.
  const double lowest_us = lowest_roofline_us(*options_.suite, r.operator_name, shape,
                                              options_.hardware, r.t_roofline_us);
  const auto bound = problems::score_shape(lowest_us, tm.time_us_median, tm.time_us_p75);
  if (bound.impossible) {
    // A verdict, not a capped score: S_j stays absent, so it never reaches S_i or S_agg.
    r.status = EvalStatus::kRejected;
    r.error = fmt::format(
        "impossible speed: {:.3g} us median ({:.3g} us at the 75th percentile) against a lowest "
        "T_roofline of {:.3g} us on {}, {:.2f}x the roofline, beyond the {:.0f}% a profile may "
        "be off: the timing was bent or the work skipped (or the profile is wrong: `atrex "
        "hardware measure`)",
        tm.time_us_median, tm.time_us_p75, lowest_us, options_.hardware.name, bound.ratio,
        problems::kImpossibleSpeedMargin * 100);
    return;
  }
  r.s_j = s.s_j;
}

Result<bool> Evaluator::precompile(const EvalTask& task) {
  const Target target = resolve_target(task.candidate.backend, options_.device_index);
  if (!target.reject.empty()) return false;  // evaluate() records why
  ATREX_ASSIGN_OR_RETURN(CompileOutcome compiled, cache_.compile(task.candidate, target.arch,
                                                                 task.settings.compile_timeout_s));
  if (options_.on_compile) options_.on_compile(compiled.cache_hit);
  return !compiled.cache_hit;
}

Result<std::vector<EvalRecord>> Evaluator::evaluate(
    const EvalTask& task, const std::function<void(const EvalRecord&)>& on_record) {
  if (!options_.suite) return internal_error("Evaluator needs a suite");
  ATREX_ASSIGN_OR_RETURN(const problems::OperatorDef* def,
                         problems::require_native_operator(task.operator_name));
  ATREX_ASSIGN_OR_RETURN(const problems::OperatorInfo* info,
                         options_.suite->require(task.operator_name));
  std::vector<const problems::Shape*> shapes;
  for (const auto& id : task.shape_ids) {
    const problems::Shape* s = info->find_shape(id);
    if (!s)
      return not_found(fmt::format("operator {} has no shape \"{}\"", task.operator_name, id));
    shapes.push_back(s);
  }
  const Target target = resolve_target(task.candidate.backend, options_.device_index);
  std::vector<EvalRecord> out;
  auto emit = [&](EvalRecord r, const problems::Shape& s) {
    finish_record(r, task.settings, s);
    if (on_record) on_record(r);
    out.push_back(std::move(r));
  };
  auto emit_all = [&](EvalStatus status, const std::string& error) {
    for (const auto* s : shapes) {
      EvalRecord r = new_eval_record(task, s->id, target.device_name);
      r.status = status;
      r.error = error;
      emit(std::move(r), *s);
    }
    return out;
  };
  if (!target.reject.empty()) return emit_all(EvalStatus::kRejected, target.reject);
  // Untrusted code runs only in the sandbox the options name (an atrex error, not a verdict:
  // the candidate is not at fault).
  ATREX_TRY(sandbox_ready(options_.sandbox, options_.child_dir));
  ATREX_ASSIGN_OR_RETURN(CompileOutcome compiled, cache_.compile(task.candidate, target.arch,
                                                                 task.settings.compile_timeout_s));
  if (options_.on_compile) options_.on_compile(compiled.cache_hit);
  spdlog::debug("compile {} ({}): {} in {:.2f} s{}", task.candidate.sha256.substr(0, 12),
                backend_name(task.candidate.backend), compiled.ok ? "ok" : "failed",
                compiled.wall_s, compiled.cache_hit ? " (cache hit)" : "");
  if (!compiled.ok) {
    const std::string& log = compiled.log;
    return emit_all(EvalStatus::kCompileError,
                    log.size() > 4000 ? log.substr(0, 4000) + "\n[...]" : log);
  }
  // Unseen shapes first (correctness only), then the task's own: a failure on an unseen shape
  // ends the task with every own shape wrong_result (unseen_check.h).
  UnseenCheck unseen;
  if (task.settings.unseen_shapes > 0) {
    const uint64_t seed =
        num::mix64(seed_base_ ^ std::hash<std::string>{}(task.task_id + "/unseen"));
    ATREX_ASSIGN_OR_RETURN(
        auto derived,
        problems::derive_unseen_shapes(*def, *info, shapes, task.settings.unseen_shapes, seed));
    unseen = UnseenCheck(std::move(derived));
  }
  std::vector<BatchItem> items;
  for (const auto& u : unseen.shapes()) {
    items.push_back(BatchItem{
        &u.shape, UnseenCheck::item(u.shape, shape_seed(seed_base_, task, u.shape.id, 0)), false});
  }
  for (const auto* s : shapes) {
    ChildShape req{s->id, s->params, {}, task.settings.performance, task.settings.range_probe,
                   false, task.settings.edge_cases};
    for (int k = 0; k < task.settings.seeds; ++k) {
      req.seeds.push_back(shape_seed(seed_base_, task, s->id, k));
    }
    items.push_back(BatchItem{s, std::move(req), true});
  }
  auto checked_emit = [&](EvalRecord r, const problems::Shape& s) {
    if (unseen.absorb(r)) return;
    unseen.decorate(r);
    emit(std::move(r), s);
  };
  BatchContext ctx{
      &task,
      compiled.library,
      target.device_name,
      options_.child_dir,
      options_.work_dir,
      options_.device_index,
      num::mix64(seed_base_ ^ std::hash<std::string>{}(task.task_id)),
      options_.stop,
      EvalSandbox{options_.sandbox, bwrap_program(options_.child_dir), options_.cpu_memory_bytes}};
  ATREX_TRY(run_shape_batch(ctx, items, checked_emit, [&] { return unseen.failure(); }));
  return out;
}

}  // namespace atrex::runner
