#include "atrex/agent/spec.h"

#include <algorithm>
#include <set>

#include <fmt/format.h>

namespace atrex::agent {

namespace {

Result<void> int_in(const JsonField& parent, const char* key, int& out, int lo, int hi) {
  if (!parent.has(key)) return ok();
  ATREX_ASSIGN_OR_RETURN(auto c, parent.at(key));
  ATREX_ASSIGN_OR_RETURN(int64_t v, c.as_int());
  if (v < lo || v > hi) return c.fail(fmt::format("expected an integer in [{}, {}]", lo, hi));
  out = static_cast<int>(v);
  return ok();
}

Result<void> only_keys(const JsonField& f, const std::set<std::string>& known) {
  for (auto& [key, _] : f.value().items()) {
    if (!known.count(key)) {
      return f.fail(fmt::format("unknown field \"{}\" (known: {})", key, fmt::join(known, ", ")));
    }
  }
  return ok();
}

// A budget in (0, hi]; absent leaves `out` (0: no such budget).
Result<void> positive_number(const JsonField& parent, const char* key, double& out, double hi) {
  if (!parent.has(key)) return ok();
  ATREX_ASSIGN_OR_RETURN(auto c, parent.at(key));
  ATREX_ASSIGN_OR_RETURN(double v, c.as_number());
  if (!(v > 0) || v > hi) return c.fail(fmt::format("expected a number in (0, {}]", hi));
  out = v;
  return ok();
}

// A provider that writes no candidates of its own (fixed kernels, the template search) cannot
// honour `target` (target.h): said on the field, with the providers that can.
tl::unexpected<Error> refuse_target(const JsonField& agent, const ProviderRegistry& providers,
                                    const std::string& provider) {
  std::vector<std::string> writers;
  for (const auto& n : providers.names()) {
    auto other = providers.require(n);
    if (!other) continue;
    const auto keys = (*other)->option_keys();
    if (std::find(keys.begin(), keys.end(), "target") != keys.end()) writers.push_back(n);
  }
  auto t = agent.at("target");
  if (!t) return tl::unexpected(t.error());
  return t->fail(fmt::format("the {} provider cannot write to a target (providers that can: {})",
                             provider, fmt::join(writers, ", ")));
}

}  // namespace

Result<AgentSpec> agent_spec_from_json(const JsonField& f, const ProviderRegistry& providers) {
  ATREX_TRY(f.expect_object());
  AgentSpec s;
  ATREX_ASSIGN_OR_RETURN(auto name, f.at("name"));
  ATREX_ASSIGN_OR_RETURN(s.name, name.as_string());
  if (s.name.empty() || s.name.find_first_of("/ \t") != std::string::npos) {
    return name.fail("expected a name without spaces or '/'");
  }
  if (f.has("provider")) {
    ATREX_ASSIGN_OR_RETURN(auto p, f.at("provider"));
    ATREX_ASSIGN_OR_RETURN(s.provider, p.as_string());
    if (auto found = providers.require(s.provider); !found) return p.fail(found.error().message);
  }
  ATREX_ASSIGN_OR_RETURN(const ProviderFactory* factory, providers.require(s.provider));
  std::set<std::string> known = {"name", "provider", "budget", "dropout", "parallel_generations"};
  for (const auto& k : factory->option_keys()) known.insert(k);
  if (f.has("target") && !known.count("target")) return refuse_target(f, providers, s.provider);
  for (auto& [key, _] : f.value().items()) {
    if (!known.count(key)) {
      return f.fail(fmt::format("unknown agent field \"{}\" (known for provider {}: {})", key,
                                s.provider, fmt::join(known, ", ")));
    }
  }
  ATREX_ASSIGN_OR_RETURN(s.options, factory->parse_options(f));
  if (f.has("budget")) {
    ATREX_ASSIGN_OR_RETURN(auto b, f.at("budget"));
    ATREX_TRY(b.expect_object());
    ATREX_TRY(only_keys(b, {"iterations", "wall_time_s", "tokens", "cost_usd"}));
    ATREX_TRY(int_in(b, "iterations", s.iterations, 1, 100000));
    ATREX_TRY(positive_number(b, "wall_time_s", s.wall_time_s, 30 * 86400.0));
    ATREX_TRY(positive_number(b, "cost_usd", s.cost_usd, 1e6));
    if (b.has("tokens")) {
      ATREX_ASSIGN_OR_RETURN(auto t, b.at("tokens"));
      ATREX_ASSIGN_OR_RETURN(s.tokens, t.as_int());
      if (s.tokens < 1 || s.tokens > 1'000'000'000'000LL) {
        return t.fail("expected a number of tokens in [1, 10^12]");
      }
    }
  }
  ATREX_TRY(int_in(f, "parallel_generations", s.parallel_generations, 1, 64));
  if (f.has("dropout")) {
    ATREX_ASSIGN_OR_RETURN(auto d, f.at("dropout"));
    ATREX_TRY(d.expect_object());
    ATREX_TRY(only_keys(d, {"patience", "max_generations", "min_improvement"}));
    ATREX_TRY(int_in(d, "patience", s.patience, 1, 100000));
    ATREX_TRY(int_in(d, "max_generations", s.max_generations, 1, 10000));
    if (d.has("min_improvement")) {
      ATREX_ASSIGN_OR_RETURN(auto m, d.at("min_improvement"));
      ATREX_ASSIGN_OR_RETURN(s.min_improvement, m.as_number());
      if (s.min_improvement < 0 || s.min_improvement > 1) {
        return m.fail("expected a fraction in [0, 1]");
      }
    }
  }
  return s;
}

}  // namespace atrex::agent
