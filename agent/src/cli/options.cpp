#include "cli/options.h"

#include <filesystem>
#include <regex>

#include <fmt/format.h>

#include "atrex/common/wire/reader.h"

namespace atrex::agent::cli {
namespace fs = std::filesystem;

namespace {

struct Preset {
  const char* name;
  OutputFormat format;
  std::vector<std::string> command;
};

// anchors-agents.md §3: the headless forms and their result formats. The CLI's own sandbox and
// approval prompts are off: it runs inside atrex's bubblewrap sandbox, headless.
const std::vector<Preset>& presets() {
  static const std::vector<Preset> p = {
      {"claude",
       OutputFormat::kClaude,
       {"claude", "-p", "{prompt}", "--output-format", "json", "--dangerously-skip-permissions",
        "--model", "{model}"}},
      {"codex",
       OutputFormat::kCodex,
       {"codex", "exec", "--json", "--color", "never", "--skip-git-repo-check",
        "--dangerously-bypass-approvals-and-sandbox", "--model", "{model}", "{prompt}"}},
      {"gemini",
       OutputFormat::kGemini,
       {"gemini", "--output-format", "json", "--yolo", "--model", "{model}", "-p", "{prompt}"}},
  };
  return p;
}

const Preset* find_preset(const std::string& name) {
  for (const auto& p : presets())
    if (name == p.name) return &p;
  return nullptr;
}

std::optional<OutputFormat> format_named(const std::string& s) {
  for (auto f : {OutputFormat::kClaude, OutputFormat::kCodex, OutputFormat::kGemini,
                 OutputFormat::kText}) {
    if (s == output_format_name(f)) return f;
  }
  return std::nullopt;
}

Result<std::vector<std::string>> string_list(const JsonField& f, bool allow_empty) {
  ATREX_TRY(f.expect_array());
  std::vector<std::string> out;
  for (size_t i = 0; i < f.value().size(); ++i) {
    ATREX_ASSIGN_OR_RETURN(std::string s, f.element(i).as_string());
    out.push_back(std::move(s));
  }
  if (!allow_empty && out.empty()) return f.fail("expected a non-empty list");
  return out;
}

Result<double> number_in(const JsonField& f, double lo, double hi, bool lo_open) {
  ATREX_ASSIGN_OR_RETURN(double v, f.as_number());
  if (v < lo || v > hi || (lo_open && v == lo)) {
    return f.fail(fmt::format("expected a number in {}{}, {}]", lo_open ? "(" : "[", lo, hi));
  }
  return v;
}

Result<Json> parse_price(const JsonField& p) {
  ATREX_TRY(p.expect_object());
  Json out = Json::object();
  for (auto& [key, _] : p.value().items()) {
    if (key != "prompt_per_mtok" && key != "completion_per_mtok") {
      return p.fail(fmt::format(
          "unknown field \"{}\" (known: prompt_per_mtok, completion_per_mtok; USD per million "
          "tokens)",
          key));
    }
    ATREX_ASSIGN_OR_RETURN(auto f, p.at(key));
    ATREX_ASSIGN_OR_RETURN(out[key], number_in(f, 0, 1e6, false));
  }
  return out;
}

// A variable's NAME, never shown when it is not one (a pasted key must not be printed).
Result<std::vector<std::string>> env_names(const JsonField& f) {
  static const std::regex kName("[A-Za-z_][A-Za-z0-9_]*");
  ATREX_TRY(f.expect_array());
  std::vector<std::string> out;
  for (size_t i = 0; i < f.value().size(); ++i) {
    const Json& v = f.value()[i];
    if (!v.is_string() || !std::regex_match(v.get<std::string>(), kName)) {
      return invalid_input(fmt::format(
          "{}: field \"{}[{}]\": expected the NAME of an environment variable "
          "([A-Za-z_][A-Za-z0-9_]*) to pass into the sandbox, never its value (the value is not "
          "shown)",
          f.source(), f.path(), i));
    }
    const std::string name = v.get<std::string>();
    // What the sandbox sets itself, and the queue's address: never taken from the worker.
    for (const char* own : {"PATH", "HOME", "TMPDIR", "ATREX_EVAL_SOCKET", "ATREX_REDIS_URL"}) {
      if (name == own) {
        return f.element(i).fail(
            "this variable is the sandbox's own (PATH, HOME, TMPDIR, ATREX_EVAL_SOCKET) or the "
            "queue's (ATREX_REDIS_URL) and cannot be passed in");
      }
    }
    out.push_back(name);
  }
  return out;
}

}  // namespace

const char* output_format_name(OutputFormat f) {
  switch (f) {
    case OutputFormat::kClaude: return "claude";
    case OutputFormat::kCodex: return "codex";
    case OutputFormat::kGemini: return "gemini";
    case OutputFormat::kText: return "text";
  }
  ATREX_UNREACHABLE("OutputFormat");
}

std::vector<std::string> option_keys() {
  return {"preset",        "command", "output_format", "model",    "extra_args", "timeout_s",
          "evals_per_run", "network", "ro_binds",      "env",      "price",      "target"};
}

Result<Json> parse_options(const JsonField& agent) {
  Json o = Json::object();
  const bool has_preset = agent.has("preset"), has_command = agent.has("command");
  if (has_preset == has_command) {
    return agent.fail(
        "a cli agent names exactly one of `preset` (claude, codex, gemini) and `command` (the "
        "CLI's argument list, a template with {prompt}, {model}, {candidate})");
  }
  OutputFormat format = OutputFormat::kText;
  std::vector<std::string> command;
  if (has_preset) {
    ATREX_ASSIGN_OR_RETURN(auto p, agent.at("preset"));
    ATREX_ASSIGN_OR_RETURN(std::string name, p.as_string());
    const Preset* preset = find_preset(name);
    if (!preset) return p.fail("unknown preset (known: claude, codex, gemini)");
    o["preset"] = name;
    format = preset->format;
    command = preset->command;
  } else {
    ATREX_ASSIGN_OR_RETURN(auto c, agent.at("command"));
    ATREX_ASSIGN_OR_RETURN(command, string_list(c, false));
    if (command.front().empty() || command.front().find('{') != std::string::npos) {
      return c.element(0).fail("expected the program (a name on PATH or a path), not a template");
    }
  }
  if (agent.has("extra_args")) {
    ATREX_ASSIGN_OR_RETURN(auto e, agent.at("extra_args"));
    ATREX_ASSIGN_OR_RETURN(auto extra, string_list(e, true));
    command.insert(command.end(), extra.begin(), extra.end());
  }
  o["command"] = command;
  if (agent.has("output_format")) {
    ATREX_ASSIGN_OR_RETURN(auto f, agent.at("output_format"));
    ATREX_ASSIGN_OR_RETURN(std::string name, f.as_string());
    auto parsed = format_named(name);
    if (!parsed) return f.fail("unknown output format (known: claude, codex, gemini, text)");
    format = *parsed;
  }
  o["output_format"] = output_format_name(format);
  if (agent.has("model")) {
    ATREX_ASSIGN_OR_RETURN(auto m, agent.at("model"));
    ATREX_ASSIGN_OR_RETURN(o["model"], m.as_string());
  }
  if (agent.has("timeout_s")) {
    ATREX_ASSIGN_OR_RETURN(auto t, agent.at("timeout_s"));
    ATREX_ASSIGN_OR_RETURN(o["timeout_s"], number_in(t, 0, 7 * 86400, true));
  }
  if (agent.has("evals_per_run")) {
    ATREX_ASSIGN_OR_RETURN(auto t, agent.at("evals_per_run"));
    ATREX_ASSIGN_OR_RETURN(int64_t n, t.as_int());
    if (n < 0 || n > 1000) return t.fail("expected an integer in [0, 1000]");
    o["evals_per_run"] = n;
  }
  if (agent.has("network")) {
    ATREX_ASSIGN_OR_RETURN(auto t, agent.at("network"));
    ATREX_ASSIGN_OR_RETURN(o["network"], t.as_bool());
  }
  if (agent.has("ro_binds")) {
    ATREX_ASSIGN_OR_RETURN(auto b, agent.at("ro_binds"));
    ATREX_ASSIGN_OR_RETURN(auto binds, string_list(b, true));
    const fs::path base = fs::absolute(fs::path(agent.source())).parent_path();
    Json out = Json::array();
    for (size_t i = 0; i < binds.size(); ++i) {
      if (binds[i].empty()) return b.element(i).fail("expected a path");
      fs::path p = binds[i];
      out.push_back((p.is_absolute() ? p : base / p).lexically_normal().string());
    }
    o["ro_binds"] = out;
  }
  if (agent.has("env")) {
    ATREX_ASSIGN_OR_RETURN(auto e, agent.at("env"));
    ATREX_ASSIGN_OR_RETURN(o["env"], env_names(e));
  }
  if (agent.has("price")) {
    ATREX_ASSIGN_OR_RETURN(auto p, agent.at("price"));
    ATREX_ASSIGN_OR_RETURN(o["price"], parse_price(p));
  }
  ATREX_TRY(parse_target_option(agent, o));
  return o;
}

Json to_json(const CliOptions& o) {
  Json j{{"command", o.command},
         {"output_format", output_format_name(o.output_format)},
         {"timeout_s", o.timeout_s},
         {"evals_per_run", o.evals_per_run},
         {"network", o.network},
         {"ro_binds", o.ro_binds},
         {"env", o.env},
         {"price",
          {{"prompt_per_mtok", o.prompt_usd_per_mtok},
           {"completion_per_mtok", o.completion_usd_per_mtok}}}};
  if (!o.preset.empty()) j["preset"] = o.preset;
  if (!o.model.empty()) j["model"] = o.model;
  if (o.target != Target::kNative) j["target"] = target_name(o.target);
  return j;
}

Result<CliOptions> options_from_json(const Json& options, const std::string& source) {
  CliOptions o;
  ATREX_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::open(JsonField(options, source)));
  std::string format;
  ATREX_TRY(r.optional("preset", o.preset));
  ATREX_TRY(r.required("command", o.command));
  ATREX_TRY(r.required("output_format", format));
  ATREX_TRY(r.optional("model", o.model));
  ATREX_TRY(r.optional("timeout_s", o.timeout_s));
  ATREX_TRY(r.optional("evals_per_run", o.evals_per_run));
  ATREX_TRY(r.optional("network", o.network));
  ATREX_TRY(r.optional("ro_binds", o.ro_binds));
  ATREX_TRY(r.optional("env", o.env));
  Json price = Json::object();
  ATREX_TRY(r.optional("price", price));
  std::string target = target_name(Target::kNative);
  ATREX_TRY(r.optional("target", target));
  ATREX_TRY(r.finish());
  o.target = target_of(Json{{"target", target}});
  if (target_name(o.target) != target) {
    return invalid_input(fmt::format("{}: bad cli options (target \"{}\")", source, target));
  }
  auto f = format_named(format);
  if (!f || o.command.empty()) {
    return invalid_input(fmt::format("{}: bad cli options (output_format \"{}\", {} command words)",
                                     source, format, o.command.size()));
  }
  o.output_format = *f;
  o.prompt_usd_per_mtok = price.value("prompt_per_mtok", 0.0);
  o.completion_usd_per_mtok = price.value("completion_per_mtok", 0.0);
  return o;
}

std::vector<std::string> expand_command(const CliOptions& o, const std::string& prompt,
                                        const std::string& candidate) {
  auto replace_all = [](std::string s, std::string_view key, const std::string& value) {
    for (size_t at = s.find(key); at != std::string::npos; at = s.find(key, at + value.size()))
      s.replace(at, key.size(), value);
    return s;
  };
  std::vector<std::string> out;
  for (size_t i = 0; i < o.command.size(); ++i) {
    const std::string& a = o.command[i];
    if (!o.preset.empty() && o.model.empty() && i + 1 < o.command.size() &&
        o.command[i + 1] == "{model}" && (a == "--model" || a == "-m")) {
      ++i;  // the CLI's default model
      continue;
    }
    // The prompt last: text in it is never taken for a placeholder.
    std::string s = replace_all(a, "{model}", o.model);
    s = replace_all(s, "{candidate}", candidate);
    out.push_back(replace_all(s, "{prompt}", prompt));
  }
  return out;
}

}  // namespace atrex::agent::cli
