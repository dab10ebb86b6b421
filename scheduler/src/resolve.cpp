// Sweep resolution (resolve.h): suite, backend, hardware profile, and the shapes each operator
// runs on.
#include "atrex/scheduler/resolve.h"

#include <algorithm>

#include <fmt/format.h>

#include "atrex/agent/target.h"
#include "atrex/common/hash.h"
#include "atrex/problems/operator.h"
#include "atrex/problems/shape_select.h"
#include "atrex/runner/environment.h"

namespace atrex::scheduler {
namespace fs = std::filesystem;

namespace {

Result<problems::Suite> load_suite(const SweepSpec& spec, const SweepOverrides& ov) {
  if (ov.suite_dir) return problems::Suite::load(*ov.suite_dir);
  if (spec.suite == "bundled") return problems::Suite::load(problems::default_suite_dir());
  fs::path dir(spec.suite);
  if (dir.is_relative() && !spec.source.empty() && spec.source.front() != '<') {
    dir = fs::path(spec.source).parent_path() / dir;
  }
  return problems::Suite::load(dir);
}

// One operator's plan: its shapes under the backend's rule, and the quick ones among them.
Result<OperatorPlan> plan_operator(const SweepSpec& spec, const problems::Suite& suite,
                                   const std::string& name, size_t index, Backend backend) {
  const auto* info = suite.find(name);
  if (!info) {
    auto e = suite.require(name).error();
    return make_error(
        e.code, fmt::format("{}: field \"operators[{}]\": {}", spec.source, index, e.message));
  }
  const auto* def = problems::find_native_operator(name);
  if (!def) {
    return make_error(ErrorCode::kNotFound,
                      fmt::format("{}: field \"operators[{}]\": {}", spec.source, index,
                                  problems::require_native_operator(name).error().message));
  }
  auto rule_it = spec.shapes.find(backend);
  const problems::ShapeRule rule =
      rule_it == spec.shapes.end() ? problems::ShapeRule{} : rule_it->second;
  OperatorPlan plan;
  plan.name = name;
  ATREX_ASSIGN_OR_RETURN(plan.shapes, problems::apply_shape_rule(rule, *info, *def, spec.source));
  ATREX_ASSIGN_OR_RETURN(
      plan.quick_shapes,
      problems::quick_shapes(*info, *def, plan.shapes, static_cast<size_t>(spec.quick_shapes)));
  return plan;
}

}  // namespace

Result<ResolvedSweep> resolve_sweep(const SweepSpec& spec, const SweepOverrides& ov) {
  ResolvedSweep r{spec, problems::Suite{}, {}, Manifest{}};
  ATREX_ASSIGN_OR_RETURN(r.suite, load_suite(spec, ov));
  Manifest& m = r.manifest;
  m.name = spec.name;
  m.source = spec.source;
  m.spec = spec.raw;
  m.suite = r.suite.dir().string();
  m.backend = runner::backend_for_machine(ov.backend ? *ov.backend : spec.backend);
  const runner::Environment& env = runner::probe_environment();
  if (!ov.remote_runners) ATREX_TRY(runner::backend_available(m.backend));
  if (m.backend == Backend::kCpu) {
    m.device = env.cpu_name;
  } else if (m.backend == Backend::kCuda && env.has_gpu()) {
    m.device = env.gpus.front().name;
  } else if (m.backend == Backend::kHip && !runner::probe_hip_environment().gpus.empty()) {
    m.device = runner::probe_hip_environment().gpus.front().name;
  } else {
    m.device = "(the runners' GPUs)";
  }
  std::vector<std::string> names = spec.operators;
  if (names.empty()) {
    for (const auto& op : r.suite.operators()) {
      if (problems::find_native_operator(op.name)) names.push_back(op.name);
    }
  }
  for (size_t i = 0; i < names.size(); ++i) {
    ATREX_ASSIGN_OR_RETURN(OperatorPlan plan, plan_operator(spec, r.suite, names[i], i, m.backend));
    m.operators.push_back(std::move(plan));
  }
  for (const auto& op : r.suite.operators()) {
    if (std::find(names.begin(), names.end(), op.name) == names.end()) {
      m.not_covered.push_back(op.name);
    }
  }
  // What each agent writes must be something this backend evaluates (target.h): said before
  // anything runs, on the agent's field.
  for (size_t i = 0; i < spec.agents.size(); ++i) {
    const agent::Target t = agent::target_of(spec.agents[i].options);
    if (auto why = agent::target_unsupported(t, m.backend)) {
      return invalid_input(fmt::format("{}: field \"agents[{}].target\": {} (agent {}, backend "
                                       "{}); got \"{}\"",
                                       spec.source, i, *why, spec.agents[i].name,
                                       backend_name(m.backend), agent::target_name(t)));
    }
  }
  m.agents = spec.agents;
  m.evaluation = spec.evaluation;
  m.quick_evaluation = spec.quick_evaluation;
  // Last: measuring the host takes a second, and bad input above should fail at once.
  ATREX_ASSIGN_OR_RETURN(
      r.hardware,
      runner::choose_hardware(ov.hardware ? *ov.hardware : spec.hardware, m.backend, r.suite,
                              m.device, "set `hardware:` in the sweep file or pass --hardware"));
  m.hardware = problems::hardware_summary(r.hardware);
  m.output = fs::absolute(ov.output ? *ov.output : fs::path(spec.output)).string();
  // The id covers everything that determines results, so a changed sweep never reuses them:
  // not where it came from or where it goes, not its lifecycle, and the hardware by name
  // (measured ceilings vary a little from run to run).
  Json identity = to_json(m);
  for (const char* key : {"sweep_id", "source", "output", "status"}) identity.erase(key);
  identity["hardware"] = r.hardware.name;
  m.sweep_id = sha256_hex(identity.dump()).substr(0, 12);
  return r;
}

}  // namespace atrex::scheduler
