// Sweep resolution: suite, backend, hardware profile, and the shapes each operator runs on.
#include <algorithm>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "atrex/common/hash.h"
#include "atrex/problems/operator.h"
#include "atrex/runner/evaluator.h"
#include "atrex/runner/host_measure.h"
#include "atrex/scheduler/local_sweep.h"

namespace atrex::scheduler {
namespace fs = std::filesystem;

namespace {

// Spreads `k` picks evenly over sorted `items` (always the first and the last when k >= 2).
std::vector<std::string> spread(const std::vector<std::pair<int64_t, std::string>>& items,
                                size_t k) {
  std::vector<std::string> out;
  if (items.empty() || k == 0) return out;
  if (k >= items.size()) {
    for (const auto& i : items) out.push_back(i.second);
    return out;
  }
  for (size_t j = 0; j < k; ++j) {
    const size_t idx = k == 1 ? 0 : j * (items.size() - 1) / (k - 1);
    if (out.empty() || out.back() != items[idx].second) out.push_back(items[idx].second);
  }
  return out;
}

// (input elements, id) of every shape, smallest first.
Result<std::vector<std::pair<int64_t, std::string>>> sized_shapes(
    const problems::OperatorInfo& info, const problems::OperatorDef& def) {
  std::vector<std::pair<int64_t, std::string>> sized;
  for (const auto& s : info.shapes) {
    ATREX_ASSIGN_OR_RETURN(problems::ResolvedShape r, problems::resolve_shape(def, s));
    int64_t n = 0;
    for (const auto& d : r.inputs) n += d.numel();
    sized.emplace_back(n, s.id);
  }
  std::stable_sort(sized.begin(), sized.end());
  return sized;
}

Result<std::vector<std::string>> apply_rule(
    const ShapeRule& rule, const problems::OperatorInfo& info,
    const std::vector<std::pair<int64_t, std::string>>& sized, const std::string& source) {
  auto ids = rule.ids.find(info.name);
  if (ids != rule.ids.end()) {
    for (const auto& id : ids->second) {
      if (!info.find_shape(id)) {
        return invalid_input(
            fmt::format("{}: field \"shapes.*.ids.{}\": operator {} has no shape \"{}\"", source,
                        info.name, info.name, id));
      }
    }
    return ids->second;
  }
  std::vector<std::string> all;
  for (const auto& s : info.shapes) all.push_back(s.id);
  if (rule.all) return all;
  std::vector<std::pair<int64_t, std::string>> fit;
  for (const auto& s : sized) {
    if (rule.max_input_elements == 0 || s.first <= rule.max_input_elements) fit.push_back(s);
  }
  if (fit.empty() && rule.at_least > 0) {
    fit.assign(sized.begin(),
               sized.begin() + std::min<size_t>(sized.size(), static_cast<size_t>(rule.at_least)));
  }
  auto picked = spread(
      fit, rule.max_per_operator > 0 ? static_cast<size_t>(rule.max_per_operator) : fit.size());
  // Keep the suite's id order in reports.
  std::vector<std::string> ordered;
  for (const auto& id : all) {
    if (std::find(picked.begin(), picked.end(), id) != picked.end()) ordered.push_back(id);
  }
  return ordered;
}

Result<problems::HardwareProfile> pick_hardware(const std::string& name, const std::string& backend,
                                                const std::string& device,
                                                const problems::Suite& suite) {
  ATREX_ASSIGN_OR_RETURN(auto profiles, problems::load_default_hardware_profiles(suite.dir()));
  if (name == "host-cpu" || (name == "auto" && backend == "cpu"))
    return runner::cached_host_profile();
  if (name != "auto") return problems::find_hardware_profile(profiles, name);
  if (auto m = problems::match_hardware_profile(profiles, device)) return *m;
  std::vector<std::string> names;
  for (const auto& p : profiles) names.push_back(p.name);
  return not_found(fmt::format(
      "no hardware profile matches the device \"{}\"; set `hardware:` in the sweep file or "
      "pass --hardware (known: {})",
      device, fmt::join(names, ", ")));
}

}  // namespace

Json ResolvedSweep::to_manifest() const {
  Json ops = Json::array();
  for (const auto& o : operators)
    ops.push_back(
        Json{{"operator", o.name}, {"shapes", o.shapes}, {"quick_shapes", o.quick_shapes}});
  Json agents = Json::array();
  for (const auto& a : spec.agents) agents.push_back(agent::to_json(a));
  return Json{{"schema", kManifestSchema},
              {"sweep_id", sweep_id},
              {"name", spec.name},
              {"source", spec.source},
              {"spec", spec.raw},
              {"suite", suite.dir().string()},
              {"backend", backend},
              {"device", device},
              {"hardware", Json{{"name", hardware.name},
                                {"p_peak", hardware.p_peak_flops_per_s},
                                {"hbm_bytes_per_s", hardware.hbm_bytes_per_s},
                                {"source", hardware.source_doc}}},
              {"agents", agents},
              {"operators", ops},
              {"not_covered", not_covered},
              {"evaluation", to_json(spec.evaluation)},
              {"quick_evaluation", to_json(spec.quick_evaluation)}};
}

Result<ResolvedSweep> resolve_sweep(const SweepSpec& spec, const SweepOverrides& ov) {
  ResolvedSweep r{spec, problems::Suite{}, {}, "", "", {}, {}, {}, ""};
  fs::path suite_dir = ov.suite_dir ? *ov.suite_dir : fs::path(spec.suite);
  if (!ov.suite_dir && spec.suite == "bundled") {
    suite_dir = problems::default_suite_dir();
  } else if (!ov.suite_dir && suite_dir.is_relative() && spec.source.front() != '<') {
    suite_dir = fs::path(spec.source).parent_path() / suite_dir;
  }
  ATREX_ASSIGN_OR_RETURN(r.suite, problems::Suite::load(suite_dir));

  const runner::Environment& env = runner::probe_environment();
  r.backend = ov.backend ? *ov.backend : spec.backend;
  if (r.backend == "auto") r.backend = env.has_gpu() ? "cuda" : "cpu";
  if (r.backend != "cpu" && r.backend != "cuda") {
    return invalid_input(
        fmt::format("unknown backend \"{}\" (expected auto, cpu or cuda)", r.backend));
  }
  if (r.backend == "cuda" && !env.has_gpu() && !ov.remote_runners) {
    return make_error(ErrorCode::kUnavailable,
                      "backend cuda needs a CUDA GPU: " + env.gpu_probe_error);
  }
  r.device = r.backend == "cuda" ? (env.has_gpu() ? env.gpus.front().name : "(the runners' GPUs)")
                                 : env.cpu_name;

  std::vector<std::string> names = spec.operators;
  if (names.empty()) {
    for (const auto& op : r.suite.operators()) {
      if (problems::find_native_operator(op.name)) names.push_back(op.name);
    }
  }
  for (size_t i = 0; i < names.size(); ++i) {
    const auto* info = r.suite.find(names[i]);
    if (!info) {
      auto e = r.suite.require(names[i]).error();
      return make_error(e.code,
                        fmt::format("{}: field \"operators[{}]\": {}", spec.source, i, e.message));
    }
    const auto* def = problems::find_native_operator(names[i]);
    if (!def) {
      return make_error(ErrorCode::kNotFound,
                        fmt::format("{}: field \"operators[{}]\": {}", spec.source, i,
                                    problems::require_native_operator(names[i]).error().message));
    }
    ATREX_ASSIGN_OR_RETURN(auto sized, sized_shapes(*info, *def));
    auto rule_it = spec.shapes.find(r.backend);
    const ShapeRule rule = rule_it == spec.shapes.end() ? ShapeRule{} : rule_it->second;
    OperatorPlan plan;
    plan.name = names[i];
    ATREX_ASSIGN_OR_RETURN(plan.shapes, apply_rule(rule, *info, sized, spec.source));
    std::vector<std::pair<int64_t, std::string>> in_plan;
    for (const auto& s : sized) {
      if (std::find(plan.shapes.begin(), plan.shapes.end(), s.second) != plan.shapes.end())
        in_plan.push_back(s);
    }
    plan.quick_shapes = spread(in_plan, static_cast<size_t>(spec.quick_shapes));
    r.operators.push_back(std::move(plan));
  }
  for (const auto& op : r.suite.operators()) {
    if (std::find(names.begin(), names.end(), op.name) == names.end())
      r.not_covered.push_back(op.name);
  }
  // Last: measuring the host takes a second, and bad input above should fail at once.
  ATREX_ASSIGN_OR_RETURN(r.hardware, pick_hardware(ov.hardware ? *ov.hardware : spec.hardware,
                                                   r.backend, r.device, r.suite));
  r.output = ov.output ? *ov.output : fs::path(spec.output);
  // The id covers everything that determines results, so a changed sweep never reuses them.
  Json identity = r.to_manifest();
  identity.erase("sweep_id");
  identity.erase("source");
  identity["hardware"] = r.hardware.name;  // measured ceilings vary a little from run to run
  r.sweep_id = sha256_hex(identity.dump()).substr(0, 12);
  return r;
}

}  // namespace atrex::scheduler
