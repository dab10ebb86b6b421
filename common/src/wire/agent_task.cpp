#include "atrex/common/wire/agent_task.h"

#include <fmt/format.h>

#include "atrex/common/wire/reader.h"

namespace atrex {

Json to_json(const AgentSpec& s) {
  Json j{{"name", s.name},
         {"provider", s.provider},
         {"iterations", s.iterations},
         {"patience", s.patience},
         {"max_generations", s.max_generations},
         {"min_improvement", s.min_improvement},
         {"options", s.options}};
  if (s.parallel_generations != 1) j["parallel_generations"] = s.parallel_generations;
  if (s.wall_time_s != 0) j["wall_time_s"] = s.wall_time_s;
  if (s.tokens != 0) j["tokens"] = s.tokens;
  if (s.cost_usd != 0) j["cost_usd"] = s.cost_usd;
  return j;
}

Result<void> read_value(const JsonField& f, AgentSpec& s) {
  ATREX_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::open(f));
  ATREX_TRY(r.required("name", s.name));
  ATREX_TRY(r.required("provider", s.provider));
  ATREX_TRY(r.required("iterations", s.iterations));
  ATREX_TRY(r.required("patience", s.patience));
  ATREX_TRY(r.required("max_generations", s.max_generations));
  ATREX_TRY(r.required("min_improvement", s.min_improvement));
  ATREX_TRY(r.required("options", s.options));
  ATREX_TRY(r.optional("parallel_generations", s.parallel_generations));
  ATREX_TRY(r.optional("wall_time_s", s.wall_time_s));
  ATREX_TRY(r.optional("tokens", s.tokens));
  ATREX_TRY(r.optional("cost_usd", s.cost_usd));
  ATREX_TRY(r.finish());
  if (!s.options.is_object()) return f.fail("options must be an object");
  if (s.parallel_generations < 1) return f.fail("parallel_generations must be at least 1");
  if (s.wall_time_s < 0 || s.tokens < 0 || s.cost_usd < 0)
    return f.fail("budgets (wall_time_s, tokens, cost_usd) must not be negative");
  return ok();
}

Json to_json(const BestCandidate& b) {
  return Json{{"source", b.source},
              {"sha256", b.sha256},
              {"file_name", b.file_name},
              {"score", b.score},
              {"provenance", b.provenance}};
}

Result<void> read_value(const JsonField& f, BestCandidate& b) {
  ATREX_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::open(f));
  ATREX_TRY(r.required("source", b.source));
  ATREX_TRY(r.required("sha256", b.sha256));
  ATREX_TRY(r.required("file_name", b.file_name));
  ATREX_TRY(r.required("score", b.score));
  ATREX_TRY(r.required("provenance", b.provenance));
  return r.finish();
}

Json to_json(const TokenUsage& u) {
  return Json{{"prompt_tokens", u.prompt_tokens},
              {"completion_tokens", u.completion_tokens},
              {"cost_usd", u.cost_usd},
              {"requests", u.requests},
              {"turns", u.turns}};
}

Result<void> read_value(const JsonField& f, TokenUsage& u) {
  ATREX_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::open(f));
  ATREX_TRY(r.required("prompt_tokens", u.prompt_tokens));
  ATREX_TRY(r.required("completion_tokens", u.completion_tokens));
  ATREX_TRY(r.required("cost_usd", u.cost_usd));
  ATREX_TRY(r.required("requests", u.requests));
  ATREX_TRY(r.optional("turns", u.turns));
  return r.finish();
}

Json to_json(const AgentTask& t) {
  Json j{{"schema", kAgentTaskSchema},
         {"kind", "agent"},
         {"sweep_id", t.sweep_id},
         {"agent", to_json(t.agent)},
         {"operator", t.op},
         {"backend", backend_name(t.backend)},
         {"hardware", t.hardware},
         {"generation", t.generation},
         {"iterations_used", t.iterations_used},
         {"seed", t.seed},
         {"best", to_json(t.best)},
         {"usage", to_json(t.usage)},
         {"quick_shapes", t.quick_shapes},
         {"full_shapes", t.full_shapes},
         {"quick_settings", to_json(t.quick_settings)},
         {"full_settings", to_json(t.full_settings)}};
  if (t.subagent != 0) j["subagent"] = t.subagent;
  return j;
}

Result<AgentTask> agent_task_from_json(const Json& j, const std::string& source) {
  AgentTask t;
  auto settings = [](const JsonField& s) {
    return eval_settings_from_json(s, {}, Completeness::kComplete);
  };
  ATREX_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::open(JsonField(j, source)));
  ATREX_TRY(r.schema(kAgentTaskSchema));
  ATREX_TRY(r.constant("kind", "agent"));
  ATREX_TRY(r.required("sweep_id", t.sweep_id));
  ATREX_TRY(r.required("agent", t.agent));
  ATREX_TRY(r.required("operator", t.op));
  ATREX_TRY(r.required("backend", t.backend));
  ATREX_TRY(r.required("hardware", t.hardware));
  ATREX_TRY(r.required("generation", t.generation));
  ATREX_TRY(r.required("iterations_used", t.iterations_used));
  ATREX_TRY(r.required("seed", t.seed));
  ATREX_TRY(r.optional("subagent", t.subagent));
  ATREX_TRY(r.required("best", t.best));
  ATREX_TRY(r.optional("usage", t.usage));
  ATREX_TRY(r.required("quick_shapes", t.quick_shapes));
  ATREX_TRY(r.required("full_shapes", t.full_shapes));
  ATREX_TRY(r.required("quick_settings", t.quick_settings, settings));
  ATREX_TRY(r.required("full_settings", t.full_settings, settings));
  ATREX_TRY(r.finish());
  if (t.subagent < 0 || t.subagent >= t.agent.parallel_generations) {
    return invalid_input(fmt::format("{}: subagent {} is outside [0, {}) (parallel_generations)",
                                     source, t.subagent, t.agent.parallel_generations));
  }
  return t;
}

}  // namespace atrex
