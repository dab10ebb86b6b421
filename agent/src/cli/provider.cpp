// The `cli` provider and its registry entry (atrex/agent/cli_provider.h).
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "atrex/agent/cli_provider.h"
#include "atrex/agent/knowledge_base.h"
#include "atrex/agent/loop.h"
#include "atrex/common/hash.h"
#include "atrex/common/process/sandbox.h"
#include "cli/eval_server.h"
#include "cli/options.h"
#include "cli/output.h"
#include "cli/sandbox.h"
#include "cli/task_text.h"
#include "cli/workspace.h"
#include "openai/prompt.h"

namespace atrex::agent {
namespace {
namespace fs = std::filesystem;
using namespace cli;

constexpr size_t kNotes = 4;                      // knowledge-base excerpts in the workspace
constexpr uint64_t kFileSizeLimit = 512ull << 20;  // RLIMIT_FSIZE of the CLI's processes
constexpr size_t kOutputReadBytes = 8u << 20;      // how much of the CLI's output is parsed

std::string trimmed(const std::string& s, size_t n) {
  return s.size() > n ? s.substr(0, n) + "..." : s;
}

std::string read_tail(const fs::path& p, size_t n) {
  std::ifstream in(p, std::ios::binary | std::ios::ate);
  if (!in) return "";
  const std::streamoff size = in.tellg();
  const std::streamoff from = size > static_cast<std::streamoff>(n) ? size - n : 0;
  in.seekg(from);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

// What one provider instance needs of its factory's lookups.
struct CliSetup {
  CliOptions options;
  fs::path bwrap;
  fs::path eval_tool;
  fs::path program_found;
  fs::path program_real;
  std::map<std::string, std::string> passed_env;  // the agent entry's `env`, with values
};

class CliProvider final : public Provider {
 public:
  CliProvider(CliSetup setup, const KnowledgeBase& kb, std::string agent)
      : s_(std::move(setup)), kb_(kb), agent_(std::move(agent)) {}
  std::string name() const override { return "cli"; }

  Result<std::optional<Proposal>> propose(const ProposalContext& ctx) override {
    if (!ws_) ATREX_TRY(stage(ctx));
    ATREX_TRY(refresh(ctx));
    return run(ctx);
  }

 private:
  // The workspace's candidate file and the extension of what the runner is given (target.h):
  // generated_kernel.py / .py for Python targets, kernel.<ext> / the backend's otherwise.
  std::string candidate_name(Backend b) const {
    return workspace_candidate_name(s_.options.target, b);
  }
  std::string extension(Backend b) const { return candidate_extension(s_.options.target, b); }

  // The generation's workspace: everything that does not change between runs.
  Result<void> stage(const ProposalContext& ctx) {
    ATREX_ASSIGN_OR_RETURN(Workspace w, Workspace::create({}));
    ws_.emplace(std::move(w));
    auto notes = kb_.select(operator_family(ctx.op), ctx.backend, std::nullopt, kNotes);
    TaskFiles files = task_files(ctx, notes, s_.options.target, s_.options.evals_per_run);
    for (const auto& [rel, text] : files) ATREX_TRY(ws_->put(rel, text));
    ATREX_TRY(ws_->put(".home/.keep", ""));
    if (ctx.best && ctx.best->valid()) {
      ATREX_TRY(ws_->put(candidate_name(ctx.backend), ctx.best->source));
    }
    return ok();
  }

  // Before each run: the best kernel so far and the feedback on the previous run's candidate.
  Result<void> refresh(const ProposalContext& ctx) {
    const std::string ext = extension(ctx.backend);
    if (ctx.best && ctx.best->valid()) {
      ATREX_TRY(ws_->put("best" + ext, ctx.best->source));
    }
    if (!ctx.memory->empty()) {
      const Attempt& last = ctx.memory->back();
      std::string text = fmt::format("# Feedback on your last candidate (iteration {})\n\n",
                                     last.iteration);
      text += last.failure.empty() ? openai::results_text(last, ctx)
                                   : "It produced no candidate: " + last.failure + "\n";
      ATREX_TRY(ws_->put("FEEDBACK.md", text));
    }
    return ok();
  }

  std::string redact(std::string text) const {
    for (const auto& [_, value] : s_.passed_env) {
      if (value.size() < 6) continue;
      for (size_t at = text.find(value); at != std::string::npos; at = text.find(value, at + 3))
        text.replace(at, value.size(), "***");
    }
    return text;
  }

  // The atrex-eval gateway's answer to one request.
  std::string gateway(const ProposalContext& ctx, const std::string& source, int& used,
                      Json& log) {
    if (used >= s_.options.evals_per_run) {
      return fmt::format(
          "atrex-eval: this run's {} evaluations are spent; leave your best version in {} and "
          "finish (it is evaluated when you exit)\n",
          s_.options.evals_per_run, candidate_name(ctx.backend));
    }
    if (!ctx.quick_eval) return "atrex-eval: no evaluator is attached to this run\n";
    ++used;
    const std::string file = fmt::format("{}_g{}_i{}{}", ctx.op, ctx.generation, ctx.iteration,
                                         extension(ctx.backend));
    auto records = (*ctx.quick_eval)(source, file);
    if (!records) {
      log.push_back(Json{{"sha256", sha256_hex(source)}, {"error", records.error().message}});
      return "atrex-eval: the evaluation could not run: " + records.error().message + "\n";
    }
    Attempt a;
    a.iteration = ctx.iteration;
    a.records = *records;
    a.score = objective(a.records, &a.summary);
    a.correct = a.score >= 0;
    log.push_back(Json{{"sha256", sha256_hex(source)}, {"score", a.score}, {"summary", a.summary}});
    return fmt::format("atrex-eval {} of {} in this run:\n", used, s_.options.evals_per_run) +
           openai::results_text(a, ctx);
  }

  Result<std::optional<Proposal>> run(const ProposalContext& ctx) {
    const CliOptions& o = s_.options;
    const std::string candidate = candidate_name(ctx.backend);
    int used = 0;
    Json evals = Json::array();
    std::mutex mu;  // the gateway thread writes `evals` and `used`; read after stop()
    EvalSocketServer server;
    const fs::path socket = ws_->run_dir() / "eval.sock";
    ATREX_TRY(server.start(socket, [&](const std::string&, const std::string& source) {
      std::lock_guard lock(mu);
      return gateway(ctx, source, used, evals);
    }));
    CliSandbox box{ws_->dir(), ws_->run_dir(), s_.eval_tool, s_.program_found, s_.program_real,
                   o.ro_binds, o.network};
    const std::string prompt = cli_prompt(ctx, o.target, o.evals_per_run);
    SubprocessOptions so;
    so.argv = cli_bwrap_argv(s_.bwrap, box,
                             expand_command(o, prompt, std::string(kSandboxWorkspace) + "/" + candidate));
    so.timeout = std::chrono::milliseconds(static_cast<int64_t>(o.timeout_s * 1000));
    so.output_file = ws_->root() / fmt::format("cli-output-{}.log", ctx.iteration);
    so.output_tail_bytes = 16 << 10;
    so.stop_signal = 0;
    so.env = sandbox_env(candidate);
    spdlog::info("[{} {} g{} i{}] running {} in a sandboxed workspace (at most {:.0f} s)", agent_,
                 ctx.op, ctx.generation, ctx.iteration, s_.program_found.filename().string(),
                 o.timeout_s);
    std::string limit_hit, cgroup;
    auto r = run_cli_session(so, ws_->dir(), CliSessionLimits{.file_bytes = kFileSizeLimit},
                             limit_hit, &cgroup);
    server.stop();
    if (!r) return tl::unexpected(r.error());
    translate_bwrap_exit(*r);
    const std::string output = read_tail(so.output_file, kOutputReadBytes);
    std::error_code ec;
    fs::remove(so.output_file, ec);
    CliRunReport report = parse_cli_output(o.output_format, output);

    Proposal p;
    p.usage.requests = 1;  // one CLI run
    p.usage.turns = report.turns;
    p.usage.prompt_tokens = report.prompt_tokens;
    p.usage.completion_tokens = report.completion_tokens;
    p.usage.cost_usd = report.cost_usd.value_or(
        report.prompt_tokens * o.prompt_usd_per_mtok / 1e6 +
        report.completion_tokens * o.completion_usd_per_mtok / 1e6);
    std::string exit = r->started ? r->describe() : "did not start: " + r->output_tail;
    if (r->ok()) exit = "exit code 0";
    if (!limit_hit.empty()) exit += "; " + limit_hit;
    p.provenance = Json{{"provider", "cli"},
                        {"program", s_.program_found.filename().string()},
                        {"output_format", output_format_name(o.output_format)},
                        {"exit", redact(exit)},
                        {"wall_s", r->wall_s},
                        {"cgroup", cgroup},
                        {"output_parsed", report.parsed},
                        {"evals", evals},
                        {"usage", to_json(p.usage)}};
    if (!o.preset.empty()) p.provenance["preset"] = o.preset;
    if (!o.model.empty()) p.provenance["model"] = o.model;
    if (is_python(o.target)) p.provenance["target"] = target_name(o.target);
    if (!report.error.empty()) p.provenance["cli_error"] = redact(trimmed(report.error, 1000));
    p.rationale = redact(trimmed(report.final_text, 4000));
    if (!report.parsed) {
      p.provenance["output_tail"] = redact(trimmed(r->output_tail, 2000));
    }
    auto taken = ws_->take(candidate);
    std::string why_none;
    if (!taken) {
      why_none = taken.error().message;
    } else if (!*taken || (*taken)->empty()) {
      why_none = fmt::format("the CLI left no {} in its workspace", candidate);
    }
    if (!why_none.empty()) {
      p.failure = fmt::format("{} ({}{})", why_none, exit,
                              report.error.empty() ? "" : "; " + redact(report.error));
      return std::optional<Proposal>{std::move(p)};
    }
    p.source = std::move(**taken);
    p.file_name = fmt::format("{}_g{}_i{}{}", ctx.op, ctx.generation, ctx.iteration,
                              extension(ctx.backend));
    return std::optional<Proposal>{std::move(p)};
  }

  std::map<std::string, std::string> sandbox_env(const std::string& candidate) const {
    std::map<std::string, std::string> env = s_.passed_env;
    env["PATH"] = fmt::format("{}:{}:/usr/local/bin:/usr/bin:/bin",
                              fs::path(kSandboxEvalTool).parent_path().string(), kSandboxCliDir);
    env["HOME"] = std::string(kSandboxWorkspace) + "/.home";
    env["TMPDIR"] = "/tmp";
    env["LANG"] = "C.UTF-8";
    env["TERM"] = "dumb";
    env["NO_COLOR"] = "1";
    env["IS_SANDBOX"] = "1";  // Claude Code: skip-permissions is allowed inside a sandbox
    env["ATREX_EVAL_SOCKET"] = kSandboxEvalSocket;
    env["ATREX_CANDIDATE"] = std::string(kSandboxWorkspace) + "/" + candidate;
    return env;
  }

  CliSetup s_;
  const KnowledgeBase& kb_;
  std::string agent_;
  std::optional<Workspace> ws_;
};

// command[0] as a path: searched on this process's PATH unless it holds a '/'.
Result<std::pair<fs::path, fs::path>> find_program(const std::string& name,
                                                   const std::string& agent) {
  std::vector<fs::path> candidates;
  if (name.find('/') != std::string::npos) {
    candidates.push_back(fs::absolute(name));
  } else if (const char* path = std::getenv("PATH")) {
    std::string_view list(path);
    for (size_t start = 0; start <= list.size();) {
      const size_t end = std::min(list.find(':', start), list.size());
      if (end > start) candidates.push_back(fs::path(std::string(list.substr(start, end - start))) / name);
      start = end + 1;
    }
  }
  for (const auto& c : candidates) {
    std::error_code ec;
    if (fs::is_regular_file(c, ec) && ::access(c.c_str(), X_OK) == 0) {
      return std::pair{c.lexically_normal(), fs::canonical(c, ec)};
    }
  }
  return invalid_input(fmt::format(
      "agent {}: the CLI program \"{}\" is not an executable file{} where this agent worker "
      "runs (install it there, or give its path in `command`)",
      agent, name, name.find('/') == std::string::npos ? " on PATH" : ""));
}

fs::path self_dir() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path() : exe.parent_path();
}

class CliFactory final : public ProviderFactory {
 public:
  explicit CliFactory(KnowledgeBase kb) : kb_(std::move(kb)) {}
  std::string name() const override { return "cli"; }
  std::vector<std::string> option_keys() const override { return cli::option_keys(); }
  Result<Json> parse_options(const JsonField& agent) const override {
    return cli::parse_options(agent);
  }
  Result<std::unique_ptr<Provider>> make(const AgentSpec& spec) const override {
    CliSetup s;
    ATREX_ASSIGN_OR_RETURN(s.options,
                           options_from_json(spec.options, "agent " + spec.name + " options"));
    ATREX_ASSIGN_OR_RETURN(auto program, find_program(s.options.command.front(), spec.name));
    s.program_found = program.first;
    s.program_real = program.second;
    const char* tool = std::getenv("ATREX_AGENT_EVAL");
    s.eval_tool = tool && *tool ? fs::path(tool) : self_dir() / "atrex-agent-eval";
    std::error_code ec;
    if (!fs::is_regular_file(s.eval_tool, ec)) {
      return invalid_input(fmt::format(
          "agent {}: the workspace's evaluation tool {} is missing (it ships next to atrex; "
          "ATREX_AGENT_EVAL overrides its path)",
          spec.name, s.eval_tool.string()));
    }
    s.bwrap = bwrap_program(self_dir());
    if (Status probe = probe_bwrap(s.bwrap); !probe) {
      // No sandbox, no CLI: a coding agent never runs with the worker's rights.
      return invalid_input(fmt::format("agent {}: the cli provider needs bubblewrap: {}",
                                       spec.name, probe.error().message));
    }
    for (const auto& var : s.options.env) {
      const char* value = std::getenv(var.c_str());
      if (!value || !*value) {
        return invalid_input(fmt::format(
            "agent {}: the environment variable {} (in its `env`) is not set or empty where "
            "this agent worker runs",
            spec.name, var));
      }
      s.passed_env[var] = value;
    }
    return std::unique_ptr<Provider>(std::make_unique<CliProvider>(std::move(s), kb_, spec.name));
  }

 private:
  KnowledgeBase kb_;
};

}  // namespace

Result<std::shared_ptr<ProviderFactory>> make_cli_provider_factory() {
  ATREX_ASSIGN_OR_RETURN(KnowledgeBase kb, KnowledgeBase::embedded());
  return std::shared_ptr<ProviderFactory>(std::make_shared<CliFactory>(std::move(kb)));
}

}  // namespace atrex::agent
