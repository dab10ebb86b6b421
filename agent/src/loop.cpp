#include "atrex/agent/loop.h"

#include <algorithm>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "atrex/common/clock.h"
#include "atrex/common/hash.h"

namespace atrex::agent {
namespace fs = std::filesystem;

Json to_json(const AgentSpec& s) {
  return Json{{"name", s.name},
              {"provider", s.provider},
              {"iterations", s.iterations},
              {"patience", s.patience},
              {"max_generations", s.max_generations},
              {"min_improvement", s.min_improvement},
              {"templates", s.templates}};
}

AgentSpec agent_spec_from_flat_json(const Json& j) {
  AgentSpec s;
  s.name = j.value("name", "");
  s.provider = j.value("provider", "search");
  s.iterations = j.value("iterations", 8);
  s.patience = j.value("patience", 3);
  s.max_generations = j.value("max_generations", 4);
  s.min_improvement = j.value("min_improvement", 0.02);
  s.templates = j.value("templates", "");
  return s;
}

Result<AgentSpec> agent_spec_from_json(const JsonField& f) {
  ATREX_TRY(f.expect_object());
  AgentSpec s;
  for (auto& [key, _] : f.value().items()) {
    static const std::set<std::string> kKnown = {"name", "provider", "budget", "dropout",
                                                 "templates"};
    if (!kKnown.count(key)) {
      return f.fail(fmt::format(
          "unknown agent field \"{}\" (known: name, provider, budget, dropout, templates)", key));
    }
  }
  ATREX_ASSIGN_OR_RETURN(auto name, f.at("name"));
  ATREX_ASSIGN_OR_RETURN(s.name, name.as_string());
  if (s.name.empty() || s.name.find_first_of("/ \t") != std::string::npos)
    return name.fail("expected a name without spaces or '/'");
  if (f.has("provider")) {
    ATREX_ASSIGN_OR_RETURN(auto p, f.at("provider"));
    ATREX_ASSIGN_OR_RETURN(s.provider, p.as_string());
    if (s.provider != "search") {
      return p.fail(
          "unsupported provider (this build has: search; openai and cli providers are not "
          "implemented yet)");
    }
  }
  if (f.has("templates")) {
    ATREX_ASSIGN_OR_RETURN(auto t, f.at("templates"));
    ATREX_ASSIGN_OR_RETURN(s.templates, t.as_string());
    // Relative to the sweep file, so a sweep and its templates travel together.
    std::filesystem::path p(s.templates);
    if (p.is_relative() && !f.source().empty() && f.source().front() != '<') {
      p = std::filesystem::absolute(std::filesystem::path(f.source()).parent_path() / p);
    }
    std::error_code ec;
    if (!std::filesystem::is_directory(p, ec)) return t.fail("template folder not found");
    s.templates = p.string();
  }
  auto int_in = [&](const JsonField& parent, const char* key, int& out, int lo,
                    int hi) -> Result<void> {
    if (!parent.has(key)) return ok();
    ATREX_ASSIGN_OR_RETURN(auto c, parent.at(key));
    ATREX_ASSIGN_OR_RETURN(int64_t v, c.as_int());
    if (v < lo || v > hi) return c.fail(fmt::format("expected an integer in [{}, {}]", lo, hi));
    out = static_cast<int>(v);
    return ok();
  };
  if (f.has("budget")) {
    ATREX_ASSIGN_OR_RETURN(auto b, f.at("budget"));
    ATREX_TRY(b.expect_object());
    ATREX_TRY(int_in(b, "iterations", s.iterations, 1, 100000));
  }
  if (f.has("dropout")) {
    ATREX_ASSIGN_OR_RETURN(auto d, f.at("dropout"));
    ATREX_TRY(d.expect_object());
    ATREX_TRY(int_in(d, "patience", s.patience, 1, 100000));
    ATREX_TRY(int_in(d, "max_generations", s.max_generations, 1, 10000));
    if (d.has("min_improvement")) {
      ATREX_ASSIGN_OR_RETURN(auto m, d.at("min_improvement"));
      ATREX_ASSIGN_OR_RETURN(s.min_improvement, m.as_number());
      if (s.min_improvement < 0 || s.min_improvement > 1)
        return m.fail("expected a fraction in [0, 1]");
    }
  }
  return s;
}

Json to_json(const AgentTask& t) {
  return Json{{"schema", kAgentTaskSchema},
              {"kind", "agent"},
              {"sweep_id", t.sweep_id},
              {"agent", to_json(t.agent)},
              {"operator", t.op},
              {"backend", t.backend},
              {"hardware", t.hardware},
              {"generation", t.generation},
              {"iterations_used", t.iterations_used},
              {"seed", t.seed},
              {"best", to_json(t.best)},
              {"quick_shapes", t.quick_shapes},
              {"full_shapes", t.full_shapes},
              {"quick_settings", to_json(t.quick_settings)},
              {"full_settings", to_json(t.full_settings)}};
}

Result<AgentTask> agent_task_from_json(const Json& j, const std::string& source) {
  JsonField root(j, source);
  ATREX_TRY(root.expect_object());
  if (j.value("schema", "") != kAgentTaskSchema)
    return root.fail(fmt::format("expected schema {}", kAgentTaskSchema));
  AgentTask t;
  try {
    t.sweep_id = j.at("sweep_id").get<std::string>();
    t.op = j.at("operator").get<std::string>();
    t.backend = j.at("backend").get<std::string>();
    t.hardware = j.value("hardware", "");
    t.generation = j.value("generation", 0);
    t.iterations_used = j.value("iterations_used", 0);
    t.seed = j.value("seed", uint64_t{0});
    t.best = best_candidate_from_json(j.value("best", Json::object()));
    t.quick_shapes = j.at("quick_shapes").get<std::vector<std::string>>();
    t.full_shapes = j.at("full_shapes").get<std::vector<std::string>>();
  } catch (const Json::exception& e) {
    return invalid_input(fmt::format("{}: malformed agent task: {}", source, e.what()));
  }
  ATREX_ASSIGN_OR_RETURN(auto agent, root.at("agent"));
  ATREX_TRY(agent.expect_object());
  t.agent = agent_spec_from_flat_json(j["agent"]);
  ATREX_ASSIGN_OR_RETURN(auto qs, root.at("quick_settings"));
  ATREX_ASSIGN_OR_RETURN(t.quick_settings, eval_settings_from_json(qs));
  ATREX_ASSIGN_OR_RETURN(auto fs_, root.at("full_settings"));
  ATREX_ASSIGN_OR_RETURN(t.full_settings, eval_settings_from_json(fs_));
  return t;
}

Result<std::unique_ptr<AuditTrail>> AuditTrail::open(const fs::path& file) {
  auto trail = std::make_unique<AuditTrail>();
  trail->file_ = file;
  std::error_code ec;
  fs::create_directories(file.parent_path(), ec);
  if (fs::exists(file, ec)) {
    std::ifstream in(file);
    for (std::string line; std::getline(in, line);) {
      try {
        trail->observe_locked(Json::parse(line));
      } catch (const Json::exception&) {
        // A torn last line of a killed run: ignored, the iteration is redone.
      }
    }
  }
  trail->out_.open(file, std::ios::app);
  if (!trail->out_) return io_error(fmt::format("{}: cannot open audit trail", file.string()));
  return trail;
}

void AuditTrail::observe_locked(const Json& e) {
  const std::string kind = e.value("event", "");
  if (kind == "evaluated") {
    tried_.insert(e.value("sha256", ""));
    ++progress_.iterations_used;
    const double score = e.value("score", -1.0);
    if (score >= 0 && score > progress_.best.score && e.contains("source")) {
      progress_.best =
          BestCandidate{e.value("source", ""), e.value("sha256", ""), e.value("file_name", ""),
                        score, e.value("provenance", Json::object())};
    }
  } else if (kind == "generation_start") {
    progress_.generation = e.value("generation", 0);
  } else if (kind == "generation_end" && e.value("reason", "") == "dropout") {
    progress_.generation = e.value("generation", 0) + 1;
  }
}

AuditTrail::Progress AuditTrail::progress() const {
  std::lock_guard lock(mu_);
  return progress_;
}

Result<void> AuditTrail::append(Json event) {
  std::lock_guard lock(mu_);
  event["ts"] = utc_timestamp_now();
  observe_locked(event);
  out_ << event.dump() << '\n';
  out_.flush();
  if (!out_) return io_error(fmt::format("{}: write failed", file_.string()));
  return ok();
}

std::set<std::string> AuditTrail::tried() const {
  std::lock_guard lock(mu_);
  return tried_;
}

const char* generation_end_name(GenerationEnd e) {
  switch (e) {
    case GenerationEnd::kDropout: return "dropout";
    case GenerationEnd::kBudget: return "budget";
    case GenerationEnd::kNoIdeas: return "no_new_candidates";
  }
  return "?";
}

std::string eval_task_id(const std::string& sweep_id, const std::string& agent,
                         const std::string& op, const std::string& purpose,
                         const std::string& candidate_sha, const std::vector<std::string>& shapes) {
  std::string material =
      sweep_id + "\n" + agent + "\n" + op + "\n" + purpose + "\n" + candidate_sha;
  for (const auto& s : shapes) material += "\n" + s;
  return fmt::format("{}-{}-{}", op, purpose, sha256_hex(material).substr(0, 16));
}

double objective(const std::vector<EvalRecord>& records, std::string* summary) {
  std::vector<double> s;
  for (const auto& r : records) {
    if (r.status != EvalStatus::kOk || !r.s_j) {
      if (summary) {
        *summary = fmt::format("shape {}: {}: {}", r.shape_id, eval_status_name(r.status),
                               r.error.substr(0, 300));
      }
      return -1;
    }
    s.push_back(*r.s_j);
  }
  if (s.empty()) return -1;
  std::sort(s.begin(), s.end());
  const double med = s.size() % 2 ? s[s.size() / 2] : 0.5 * (s[s.size() / 2 - 1] + s[s.size() / 2]);
  if (summary) {
    *summary = fmt::format("median S_j {:.4f} over {} shapes", med, s.size());
    for (const auto& r : records)
      *summary +=
          fmt::format("; {}: {:.2f} us", r.shape_id, r.timing ? r.timing->time_us_median : 0.0);
  }
  return med;
}

namespace {

EvalTask make_eval_task(const AgentTask& t, const std::string& purpose, const std::string& source,
                        const std::string& file_name, const std::vector<std::string>& shapes,
                        const EvalSettings& settings, int iteration) {
  EvalTask e;
  e.sweep_id = t.sweep_id;
  e.operator_name = t.op;
  e.shape_ids = shapes;
  e.hardware = t.hardware;
  e.purpose = purpose;
  e.settings = settings;
  e.candidate.source = source;
  e.candidate.sha256 = sha256_hex(source);
  e.candidate.backend = t.backend;
  e.candidate.agent = t.agent.name;
  e.candidate.generation = t.generation;
  e.candidate.iteration = iteration;
  e.candidate.file_name = file_name;
  e.task_id = eval_task_id(t.sweep_id, t.agent.name, t.op, purpose, e.candidate.sha256, shapes);
  return e;
}

}  // namespace

Result<GenerationResult> run_generation(const AgentTask& task, Provider& provider,
                                        const EvalFn& evaluate, AuditTrail& audit) {
  GenerationResult result;
  result.next = task;
  AgentTask& state = result.next;
  std::vector<Attempt> memory;  // this generation only: a dropout starts without it
  int since_improvement = 0;
  ATREX_TRY(audit.append(Json{{"event", "generation_start"},
                              {"generation", task.generation},
                              {"iterations_used", task.iterations_used},
                              {"best_score", task.best.score},
                              {"best_sha256", task.best.sha256}}));
  for (int it = 0;; ++it) {
    if (state.iterations_used >= task.agent.iterations) {
      result.end = GenerationEnd::kBudget;
      break;
    }
    const std::set<std::string> tried = audit.tried();
    ProposalContext ctx{task.op,   task.backend, task.generation, it,
                        task.seed, &memory,      &tried,          &state.best};
    ATREX_ASSIGN_OR_RETURN(std::optional<Proposal> proposal, provider.propose(ctx));
    if (!proposal) {
      result.end = GenerationEnd::kNoIdeas;
      break;
    }
    EvalTask et = make_eval_task(task, "quick", proposal->source, proposal->file_name,
                                 task.quick_shapes, task.quick_settings, it);
    ATREX_ASSIGN_OR_RETURN(std::vector<EvalRecord> records, evaluate(et));
    ++state.iterations_used;
    Attempt a;
    a.generation = task.generation;
    a.iteration = it;
    a.sha256 = et.candidate.sha256;
    a.provenance = proposal->provenance;
    a.score = objective(records, &a.summary);
    a.correct = a.score >= 0;
    const double prev = state.best.score;
    const bool improved =
        a.correct && (prev < 0 || a.score > prev * (1.0 + task.agent.min_improvement));
    if (a.correct && a.score > prev) {  // keep the best even when the gain is within noise
      state.best = BestCandidate{proposal->source, a.sha256, proposal->file_name, a.score,
                                 proposal->provenance};
    }
    since_improvement = improved ? 0 : since_improvement + 1;
    Json recs = Json::array();
    for (const auto& r : records) {
      recs.push_back(Json{{"shape_id", r.shape_id},
                          {"status", eval_status_name(r.status)},
                          {"time_us_median", r.timing ? r.timing->time_us_median : 0.0},
                          {"s_j", r.s_j ? Json(*r.s_j) : Json(nullptr)},
                          {"error", r.error.substr(0, 500)}});
    }
    ATREX_TRY(audit.append(
        Json{{"event", "evaluated"},
             {"generation", task.generation},
             {"iteration", it},
             {"sha256", a.sha256},
             {"task_id", et.task_id},
             {"provenance", a.provenance},
             {"file_name", proposal->file_name},
             {"source", proposal->source},
             {"rationale", proposal->rationale},
             {"score", a.score},
             {"summary", a.summary},
             {"decision", !a.correct ? "incorrect" : (improved ? "improved" : "no_gain")},
             {"best_score", state.best.score},
             {"records", recs}}));
    spdlog::info("[{} {} g{} i{}] {} -> {}", task.agent.name, task.op, task.generation, it,
                 proposal->provenance.value("template", "") + " " +
                     proposal->provenance.value("params", Json::object()).dump(),
                 a.summary);
    memory.push_back(std::move(a));
    if (since_improvement >= task.agent.patience &&
        task.generation + 1 < task.agent.max_generations &&
        state.iterations_used < task.agent.iterations) {
      result.end = GenerationEnd::kDropout;
      break;
    }
  }
  ATREX_TRY(audit.append(Json{{"event", "generation_end"},
                              {"generation", task.generation},
                              {"reason", generation_end_name(result.end)},
                              {"iterations_used", state.iterations_used},
                              {"best_score", state.best.score},
                              {"best_sha256", state.best.sha256}}));
  if (result.end == GenerationEnd::kDropout) {
    state.generation = task.generation + 1;  // a fresh sub-agent: new direction, no memory
  }
  return result;
}

Result<std::vector<EvalRecord>> run_final_evaluation(const AgentTask& task, const EvalFn& evaluate,
                                                     AuditTrail& audit) {
  if (!task.best.valid()) {
    ATREX_TRY(audit.append(Json{{"event", "final"}, {"status", "no_correct_candidate"}}));
    return not_found(
        fmt::format("agent {} found no correct candidate for {}", task.agent.name, task.op));
  }
  EvalTask et = make_eval_task(task, "full", task.best.source, task.best.file_name,
                               task.full_shapes, task.full_settings, 0);
  et.candidate.generation = task.generation;
  ATREX_ASSIGN_OR_RETURN(std::vector<EvalRecord> records, evaluate(et));
  int passed = 0;
  for (const auto& r : records) passed += r.status == EvalStatus::kOk;
  ATREX_TRY(audit.append(Json{{"event", "final"},
                              {"task_id", et.task_id},
                              {"sha256", et.candidate.sha256},
                              {"provenance", task.best.provenance},
                              {"shapes", records.size()},
                              {"shapes_passed", passed}}));
  return records;
}

}  // namespace atrex::agent
