#include "atrex/scheduler/sweep_spec.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <set>

#include <fmt/format.h>

#include "atrex/common/embedded.h"
#include "atrex/agent/spec.h"
#include "atrex/common/metrics_server.h"
#include "atrex/common/wire/cluster_options.h"

namespace atrex::scheduler {

namespace sweeps_data {
std::span<const EmbeddedFile> embedded_files();
}

std::string_view embedded_default_sweep() {
  auto f = find_embedded(sweeps_data::embedded_files(), "local-default.yaml");
  return f ? *f : std::string_view();
}

namespace {

Result<void> check_keys(const JsonField& f, const std::set<std::string>& known) {
  ATREX_TRY(f.expect_object());
  for (auto& [key, _] : f.value().items()) {
    if (!known.count(key)) {
      std::string list;
      for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
      return invalid_input(fmt::format("{}: field \"{}{}{}\" is not a known field here (known: {})",
                                       f.source(), f.path(), f.path().empty() ? "" : ".", key,
                                       list));
    }
  }
  return ok();
}

Result<std::string> string_field(const JsonField& f, const char* key, std::string dflt) {
  if (!f.has(key)) return dflt;
  ATREX_ASSIGN_OR_RETURN(auto c, f.at(key));
  return c.as_string();
}

Result<problems::ShapeRule> parse_shape_rule(const JsonField& f) {
  problems::ShapeRule r;
  if (f.value().is_string()) {
    ATREX_ASSIGN_OR_RETURN(std::string s, f.as_string());
    if (s != "all")
      return f.fail(
          "expected `all` or a mapping with ids / max_input_elements / max_per_operator / "
          "at_least / reduced");
    return r;
  }
  ATREX_TRY(
      check_keys(f, {"ids", "max_input_elements", "max_per_operator", "at_least", "reduced"}));
  r.all = false;
  auto int_field = [&](const char* key, auto& out) -> Result<void> {
    if (!f.has(key)) return ok();
    ATREX_ASSIGN_OR_RETURN(auto c, f.at(key));
    ATREX_ASSIGN_OR_RETURN(int64_t v, c.as_int());
    if (v < 0) return c.fail("expected a non-negative integer");
    out = static_cast<std::remove_reference_t<decltype(out)>>(v);
    return ok();
  };
  ATREX_TRY(int_field("max_input_elements", r.max_input_elements));
  ATREX_TRY(int_field("max_per_operator", r.max_per_operator));
  ATREX_TRY(int_field("at_least", r.at_least));
  if (f.has("reduced")) {
    ATREX_ASSIGN_OR_RETURN(auto c, f.at("reduced"));
    ATREX_ASSIGN_OR_RETURN(r.reduced, c.as_bool());
  }
  if (f.has("ids")) {
    ATREX_ASSIGN_OR_RETURN(auto ids, f.at("ids"));
    ATREX_TRY(ids.expect_object());
    for (auto& [op, list] : ids.value().items()) {
      JsonField lf(list, f.source(), ids.path() + "." + op);
      ATREX_TRY(lf.expect_array());
      // An empty list would select nothing or, read as "no rule", everything: neither is what
      // the file says, so it is refused (a sweep never widens silently).
      if (list.empty()) return lf.fail("expected at least one shape id");
      for (size_t i = 0; i < list.size(); ++i) {
        const Json& v = list[i];
        std::string id;
        if (v.is_number_integer())
          id = std::to_string(v.get<int64_t>());
        else if (v.is_string())
          id = v.get<std::string>();
        else
          return lf.element(i).fail("expected a shape id");
        if (std::find(r.ids[op].begin(), r.ids[op].end(), id) != r.ids[op].end())
          return lf.element(i).fail(fmt::format("duplicate shape id {}", id));
        r.ids[op].push_back(std::move(id));
      }
    }
  }
  return r;
}

// The `cluster` section (docs/sweeps.md "Cluster sweeps"), normalised to the manifest's
// "cluster" keys.
Result<Json> parse_cluster_section(const JsonField& f) {
  ATREX_TRY(check_keys(
      f, {"launcher", "runners", "agent_workers", "gpus_per_runner", "gpu_partition",
          "cpu_partition", "time_limit", "array_throttle", "sbatch_args", "job_template",
          "lease_timeout_s", "max_deliveries", "prefetch", "metrics", "metrics_targets"}));
  Json out = Json::object();
  for (const char* key :
       {"launcher", "gpu_partition", "cpu_partition", "job_template", "metrics_targets"}) {
    if (!f.has(key)) continue;
    ATREX_ASSIGN_OR_RETURN(auto c, f.at(key));
    ATREX_ASSIGN_OR_RETURN(std::string v, c.as_string());
    if (std::string_view(key) == "launcher" && v != "local" && v != "slurm")
      return c.fail("expected local or slurm");
    const bool is_path = std::string_view(key) == "job_template" ||
                         (std::string_view(key) == "metrics_targets" && !v.empty());
    if (is_path && !f.source().empty() && f.source().front() != '<') {
      v = (std::filesystem::path(f.source()).parent_path() / v)
              .lexically_normal()
              .string();  // relative to the file
    }
    out[key] = v;
  }
  auto int_in = [&](const char* key, int64_t lo, int64_t hi) -> Result<void> {
    if (!f.has(key)) return ok();
    ATREX_ASSIGN_OR_RETURN(auto c, f.at(key));
    ATREX_ASSIGN_OR_RETURN(int64_t v, c.as_int());
    if (v < lo || v > hi) return c.fail(fmt::format("expected an integer in [{}, {}]", lo, hi));
    out[key] = v;
    return ok();
  };
  ATREX_TRY(int_in("runners", 1, 100000));
  ATREX_TRY(int_in("agent_workers", 1, 100000));
  ATREX_TRY(int_in("gpus_per_runner", 1, 64));
  ATREX_TRY(int_in("array_throttle", 0, 100000));
  ATREX_TRY(int_in("lease_timeout_s", 3, 86400));
  ATREX_TRY(int_in("max_deliveries", 1, 100));
  ATREX_TRY(int_in("prefetch", 0, 16));
  if (f.has("metrics")) {
    // ADDR:PORT the workers serve /metrics on; "" = none.
    ATREX_ASSIGN_OR_RETURN(auto c, f.at("metrics"));
    ATREX_ASSIGN_OR_RETURN(std::string v, c.as_string());
    if (!v.empty()) {
      auto a = metrics::parse_listen_address(v, "metrics");
      if (!a)
        return c.fail(
            "expected ADDR:PORT (a numeric IPv4 address or [IPv6], port 0-65535; 0 = any free "
            "port)");
    }
    out["metrics"] = v;
  }
  if (f.has("time_limit")) {
    // Slurm's --time: "minutes", "HH:MM:SS", "D-HH:MM" ...; a bare number is minutes.
    ATREX_ASSIGN_OR_RETURN(auto c, f.at("time_limit"));
    if (c.value().is_number_integer() && c.value().get<int64_t>() > 0) {
      out["time_limit"] = std::to_string(c.value().get<int64_t>());
    } else {
      ATREX_ASSIGN_OR_RETURN(std::string v, c.as_string());
      if (v.empty() || v.find_first_not_of("0123456789:-") != std::string::npos) {
        return c.fail("expected a Slurm time limit (minutes, MM:SS, HH:MM:SS, D-HH or D-HH:MM:SS)");
      }
      out["time_limit"] = v;
    }
  }
  if (f.has("sbatch_args")) {
    ATREX_ASSIGN_OR_RETURN(auto c, f.at("sbatch_args"));
    ATREX_TRY(c.expect_array());
    Json args = Json::array();
    for (size_t i = 0; i < c.value().size(); ++i) {
      ATREX_ASSIGN_OR_RETURN(std::string a, c.element(i).as_string());
      if (a.rfind("-", 0) != 0)
        return c.element(i).fail("expected an sbatch option such as --account=NAME");
      args.push_back(a);
    }
    out["sbatch_args"] = args;
  }
  return out;
}

}  // namespace

Result<SweepSpec> parse_sweep(std::string_view text, const std::string& source,
                              const agent::ProviderRegistry& providers) {
  ATREX_ASSIGN_OR_RETURN(Json doc, parse_yaml_to_json(text, source));
  JsonField root(doc, source);
  if (!doc.is_object()) return root.fail("a sweep file is a YAML mapping");
  ATREX_TRY(
      check_keys(root, {"schema", "name", "suite", "hardware", "backend", "agents", "operators",
                        "shapes", "evaluation", "quick_evaluation", "output", "cluster"}));
  SweepSpec s;
  s.source = source;
  s.raw = doc;
  if (root.has("schema")) {
    ATREX_ASSIGN_OR_RETURN(auto sc, root.at("schema"));
    ATREX_ASSIGN_OR_RETURN(std::string v, sc.as_string());
    if (v != kSweepSchema)
      return sc.fail(fmt::format("unsupported schema (this atrex reads {})", kSweepSchema));
  }
  ATREX_ASSIGN_OR_RETURN(auto name, root.at("name"));
  ATREX_ASSIGN_OR_RETURN(s.name, name.as_string());
  if (s.name.empty() || s.name.find_first_of("/ \t") != std::string::npos)
    return name.fail("expected a name without spaces or '/'");
  ATREX_ASSIGN_OR_RETURN(s.suite, string_field(root, "suite", "bundled"));
  ATREX_ASSIGN_OR_RETURN(s.hardware, string_field(root, "hardware", "auto"));
  if (root.has("backend")) {
    ATREX_ASSIGN_OR_RETURN(auto b, root.at("backend"));
    ATREX_ASSIGN_OR_RETURN(std::string v, b.as_string());
    auto choice = parse_backend_choice(v, "backend");
    if (!choice) return b.fail("expected auto, cpu, cuda or hip");
    s.backend = *choice;
  }
  if (!root.has("agents")) {
    // Without an agents list: the built-in search agent with its default budget.
    s.agents.push_back(AgentSpec{.name = "search"});
  } else {
    ATREX_ASSIGN_OR_RETURN(auto agents, root.at("agents"));
    ATREX_TRY(agents.expect_array());
    if (agents.value().empty()) return agents.fail("expected at least one agent");
    std::set<std::string> names;
    for (size_t i = 0; i < agents.value().size(); ++i) {
      ATREX_ASSIGN_OR_RETURN(AgentSpec a,
                             agent::agent_spec_from_json(agents.element(i), providers));
      if (!names.insert(a.name).second)
        return agents.element(i).fail(fmt::format("duplicate agent name \"{}\"", a.name));
      s.agents.push_back(std::move(a));
    }
  }
  if (root.has("operators")) {
    ATREX_ASSIGN_OR_RETURN(auto ops, root.at("operators"));
    if (ops.value().is_string()) {
      ATREX_ASSIGN_OR_RETURN(std::string v, ops.as_string());
      if (v != "all") return ops.fail("expected `all` or a list of operator names");
    } else {
      ATREX_TRY(ops.expect_array());
      // An empty list means nothing, not `all` (which is what an empty list is internally).
      if (ops.value().empty()) return ops.fail("expected `all` or at least one operator name");
      for (size_t i = 0; i < ops.value().size(); ++i) {
        ATREX_ASSIGN_OR_RETURN(std::string op, ops.element(i).as_string());
        if (std::find(s.operators.begin(), s.operators.end(), op) != s.operators.end())
          return ops.element(i).fail(fmt::format("duplicate operator {}", op));
        s.operators.push_back(op);
      }
    }
  }
  if (root.has("shapes")) {
    ATREX_ASSIGN_OR_RETURN(auto sh, root.at("shapes"));
    ATREX_TRY(check_keys(sh, {"cpu", "cuda", "hip", "quick"}));
    for (Backend backend : kAllBackends) {
      if (!sh.has(backend_name(backend))) continue;
      ATREX_ASSIGN_OR_RETURN(auto rf, sh.at(backend_name(backend)));
      ATREX_ASSIGN_OR_RETURN(s.shapes[backend], parse_shape_rule(rf));
    }
    if (sh.has("quick")) {
      ATREX_ASSIGN_OR_RETURN(auto q, sh.at("quick"));
      ATREX_ASSIGN_OR_RETURN(int64_t v, q.as_int());
      if (v < 1 || v > 1000) return q.fail("expected an integer in [1, 1000]");
      s.quick_shapes = static_cast<int>(v);
    }
  }
  if (root.has("evaluation")) {
    ATREX_ASSIGN_OR_RETURN(auto e, root.at("evaluation"));
    ATREX_ASSIGN_OR_RETURN(s.evaluation, eval_settings_from_json(e));
  }
  // Quick evaluations inherit the evaluation settings, with fewer seeds and less timing.
  s.quick_evaluation = s.evaluation;
  s.quick_evaluation.seeds = std::min(s.evaluation.seeds, 2);
  s.quick_evaluation.min_time_s = std::min(s.evaluation.min_time_s, 0.02);
  s.quick_evaluation.max_timing_s = std::min(s.evaluation.max_timing_s, 1.0);
  s.quick_evaluation.target_rse = std::max(s.evaluation.target_rse, 0.03);
  if (root.has("quick_evaluation")) {
    ATREX_ASSIGN_OR_RETURN(auto q, root.at("quick_evaluation"));
    ATREX_ASSIGN_OR_RETURN(s.quick_evaluation, eval_settings_from_json(q, s.quick_evaluation));
  }
  ATREX_ASSIGN_OR_RETURN(s.output, string_field(root, "output", "results/" + s.name));
  if (root.has("cluster")) {
    ATREX_ASSIGN_OR_RETURN(auto c, root.at("cluster"));
    ATREX_ASSIGN_OR_RETURN(s.cluster, parse_cluster_section(c));
    // What submit will read back as ClusterOptions (partial: the flags and defaults fill in).
    ATREX_TRY(cluster_options_from_json(JsonField(s.cluster, source, "cluster")));
    s.raw.erase("cluster");
  }
  return s;
}

Result<std::string> expand_sweep_variables(std::string_view text, const std::string& source,
                                           const SweepEnv& env) {
  static constexpr std::string_view kPrefix = "ATREX_SWEEP_";
  std::string out;
  size_t line = 1, pos = 0;
  for (;;) {
    const size_t at = text.find("${", pos);
    const std::string_view before = text.substr(pos, at == std::string_view::npos ? at : at - pos);
    line += static_cast<size_t>(std::count(before.begin(), before.end(), '\n'));
    out += before;
    if (at == std::string_view::npos) return out;
    const size_t end = text.find('}', at);
    const size_t eol = text.find('\n', at);
    if (end == std::string_view::npos || (eol != std::string_view::npos && eol < end)) {
      return invalid_input(
          fmt::format("{}:{}: \"${{\" without a closing \"}}\" on its line", source, line));
    }
    const std::string_view body = text.substr(at + 2, end - at - 2);
    const size_t dash = body.find(":-");
    const std::string name(body.substr(0, dash));
    bool valid = name.size() > kPrefix.size() && name.starts_with(kPrefix);
    for (char c : name) valid = valid && (std::isupper(static_cast<unsigned char>(c)) ||
                                          std::isdigit(static_cast<unsigned char>(c)) || c == '_');
    if (!valid) {
      return invalid_input(fmt::format(
          "{}:{}: \"${{{}}}\": only variables named ATREX_SWEEP_<NAME> (capitals, digits, _) are "
          "expanded in a sweep file, as ${{ATREX_SWEEP_NAME}} or ${{ATREX_SWEEP_NAME:-default}}",
          source, line, body));
    }
    const char* value = env(name.c_str());
    if (value && *value) {
      out += value;
    } else if (dash != std::string_view::npos) {
      out += body.substr(dash + 2);
    } else {
      return invalid_input(fmt::format(
          "{}:{}: the variable {} is not set and \"${{{}}}\" gives no default (write "
          "${{{}:-default}})",
          source, line, name, body, name));
    }
    pos = end + 1;
  }
}

Result<SweepSpec> load_sweep_file(const std::filesystem::path& path,
                                  const agent::ProviderRegistry& providers) {
  ATREX_ASSIGN_OR_RETURN(std::string text, read_text_file(path));
  ATREX_ASSIGN_OR_RETURN(std::string expanded,
                         expand_sweep_variables(text, path.string(),
                                                [](const char* n) { return std::getenv(n); }));
  return parse_sweep(expanded, path.string(), providers);
}

Result<void> add_kernels_from_agent(SweepSpec& spec, const std::filesystem::path& dir,
                                    const agent::ProviderRegistry& providers) {
  if (!spec.raw.contains("agents")) {
    return invalid_input(fmt::format("--kernels-from: {} has no `agents` list to add the agent "
                                     "`best` to (sweeps/nightly.yaml has one)", spec.source));
  }
  for (const auto& a : spec.agents) {
    if (a.name == "best") {
      return invalid_input(fmt::format("--kernels-from: {} already has an agent named best",
                                       spec.source));
    }
  }
  std::error_code ec;
  const Json entry{{"name", "best"},
                   {"provider", "fixed"},
                   {"kernels", std::filesystem::absolute(dir, ec).lexically_normal().string()},
                   {"budget", Json{{"iterations", 1}}}};
  ATREX_ASSIGN_OR_RETURN(AgentSpec a,
                         agent::agent_spec_from_json(JsonField(entry, "--kernels-from"), providers));
  spec.agents.push_back(std::move(a));
  spec.raw["agents"].push_back(entry);
  return ok();
}

}  // namespace atrex::scheduler
