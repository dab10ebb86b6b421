#include "cli/output.h"

#include <sstream>
#include <string_view>

#include "atrex/common/untrusted_json.h"

namespace atrex::agent::cli {

namespace {

int64_t int_of(const Json& j, const char* key) {
  if (!j.is_object() || !j.contains(key)) return 0;
  const Json& v = j[key];
  return v.is_number_integer() || v.is_number_unsigned() ? v.get<int64_t>()
         : v.is_number()                                  ? static_cast<int64_t>(v.get<double>())
                                                          : 0;
}

std::string string_of(const Json& j, const char* key) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_string()) return "";
  return j[key].get<std::string>();
}

// One JSON value of the agent's output, or discarded: the coding agent is untrusted, and a value
// nested past kAgentJsonDepth levels is refused at the parse (nlohmann's serialiser and
// comparisons recurse: a few hundred thousand levels overflowed the stack of the runner's own
// process in attack round 9; docs/evaluation.md "Threat model").
Json parse_agent_json(std::string_view text) {
  auto parsed = parse_untrusted_json(text, kAgentJsonDepth);
  return parsed ? std::move(*parsed) : Json(Json::value_t::discarded);
}

// Every JSON object of the output: the whole text when it is one document, else one per line
// (JSONL, or a JSON document after progress lines).
std::vector<Json> json_values(const std::string& output) {
  std::vector<Json> out;
  Json whole = parse_agent_json(output);
  if (!whole.is_discarded()) {
    if (whole.is_array()) {
      for (auto& v : whole) out.push_back(v);
    } else {
      out.push_back(std::move(whole));
    }
    return out;
  }
  std::istringstream in(output);
  std::string line;
  while (std::getline(in, line)) {
    const size_t at = line.find('{');
    if (at == std::string::npos) continue;
    Json v = parse_agent_json(std::string_view(line).substr(at));
    if (!v.is_discarded() && v.is_object()) out.push_back(std::move(v));
  }
  // A pretty-printed object after progress text: from the first '{' at a line start.
  if (out.empty()) {
    const size_t at = output.find("\n{");
    if (at != std::string::npos) {
      Json v = parse_agent_json(std::string_view(output).substr(at + 1));
      if (!v.is_discarded() && v.is_object()) out.push_back(std::move(v));
    }
  }
  return out;
}

void parse_claude(const std::vector<Json>& values, CliRunReport& r) {
  const Json* result = nullptr;
  for (const auto& v : values)
    if (v.is_object() && string_of(v, "type") == "result") result = &v;
  if (!result) return;
  const Json& j = *result;
  r.parsed = true;
  r.turns = int_of(j, "num_turns");
  r.final_text = string_of(j, "result");
  for (const char* key : {"total_cost_usd", "cost_usd"}) {
    if (j.contains(key) && j[key].is_number()) {
      r.cost_usd = j[key].get<double>();
      break;
    }
  }
  if (j.contains("usage")) {
    const Json& u = j["usage"];
    r.prompt_tokens = int_of(u, "input_tokens") + int_of(u, "cache_creation_input_tokens") +
                      int_of(u, "cache_read_input_tokens");
    r.completion_tokens = int_of(u, "output_tokens");
  }
  const bool is_error = j.value("is_error", false);
  const std::string subtype = string_of(j, "subtype");
  if (is_error || (!subtype.empty() && subtype != "success")) {
    r.error = "claude: " + (subtype.empty() ? std::string("error") : subtype) +
              (r.final_text.empty() ? "" : ": " + r.final_text.substr(0, 500));
  }
}

void parse_codex(const std::vector<Json>& values, CliRunReport& r) {
  for (const auto& v : values) {
    const std::string type = string_of(v, "type");
    if (type == "thread.started" || type == "turn.started") r.parsed = true;
    if (type == "turn.completed") {
      r.parsed = true;
      ++r.turns;
      if (v.contains("usage")) {
        r.prompt_tokens += int_of(v["usage"], "input_tokens");
        r.completion_tokens += int_of(v["usage"], "output_tokens");
      }
    } else if (type == "item.completed" && v.contains("item")) {
      const Json& item = v["item"];
      const std::string kind =
          item.contains("type") ? string_of(item, "type") : string_of(item, "item_type");
      if (kind == "agent_message") r.final_text = string_of(item, "text");
    } else if (type == "turn.failed") {
      r.parsed = true;
      r.error = "codex: turn failed: " +
                (v.contains("error") ? string_of(v["error"], "message") : std::string());
    } else if (type == "error") {
      r.error = "codex: " + string_of(v, "message");
    }
  }
}

void parse_gemini(const std::vector<Json>& values, CliRunReport& r) {
  const Json* doc = nullptr;
  for (const auto& v : values)
    if (v.is_object() && (v.contains("response") || v.contains("stats") || v.contains("error")))
      doc = &v;
  if (!doc) return;
  const Json& j = *doc;
  r.parsed = true;
  r.final_text = string_of(j, "response");
  if (j.contains("stats") && j["stats"].is_object() && j["stats"].contains("models") &&
      j["stats"]["models"].is_object()) {
    for (auto& [_, m] : j["stats"]["models"].items()) {
      if (m.contains("api")) r.turns += int_of(m["api"], "totalRequests");
      if (m.contains("tokens")) {
        r.prompt_tokens += int_of(m["tokens"], "prompt");
        r.completion_tokens += int_of(m["tokens"], "candidates") + int_of(m["tokens"], "thoughts");
      }
    }
  }
  if (j.contains("error") && !j["error"].is_null()) {
    const Json& e = j["error"];
    r.error = "gemini: " + (e.is_object() ? string_of(e, "message") : e.dump());
  }
}

}  // namespace

CliRunReport parse_cli_output(OutputFormat format, const std::string& output) {
  CliRunReport r;
  if (format == OutputFormat::kText) {
    r.parsed = true;
    r.final_text = output.size() > 4000 ? output.substr(output.size() - 4000) : output;
    return r;
  }
  const std::vector<Json> values = json_values(output);
  switch (format) {
    case OutputFormat::kClaude: parse_claude(values, r); break;
    case OutputFormat::kCodex: parse_codex(values, r); break;
    case OutputFormat::kGemini: parse_gemini(values, r); break;
    case OutputFormat::kText: break;
  }
  return r;
}

}  // namespace atrex::agent::cli
