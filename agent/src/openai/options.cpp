#include "openai/options.h"

#include "atrex/agent/target.h"

#include <cstdlib>
#include <regex>

#include <fmt/format.h>

#include "atrex/common/http/client.h"
#include "atrex/common/wire/reader.h"

namespace atrex::agent::openai {

namespace {

Result<double> number_in(const JsonField& f, double lo, double hi, bool lo_open) {
  ATREX_ASSIGN_OR_RETURN(double v, f.as_number());
  if (v < lo || v > hi || (lo_open && v == lo)) {
    return f.fail(fmt::format("expected a number in {}{}, {}]", lo_open ? "(" : "[", lo, hi));
  }
  return v;
}

Result<int64_t> int_in(const JsonField& f, int64_t lo, int64_t hi) {
  ATREX_ASSIGN_OR_RETURN(int64_t v, f.as_int());
  if (v < lo || v > hi) return f.fail(fmt::format("expected an integer in [{}, {}]", lo, hi));
  return v;
}

Result<void> parse_price(const JsonField& p, Json& out) {
  ATREX_TRY(p.expect_object());
  for (auto& [key, _] : p.value().items()) {
    if (key != "prompt_per_mtok" && key != "completion_per_mtok") {
      return p.fail(fmt::format(
          "unknown field \"{}\" (known: prompt_per_mtok, completion_per_mtok; USD per million "
          "tokens)",
          key));
    }
  }
  for (const char* key : {"prompt_per_mtok", "completion_per_mtok"}) {
    if (!p.has(key)) continue;
    ATREX_ASSIGN_OR_RETURN(auto f, p.at(key));
    ATREX_ASSIGN_OR_RETURN(out[key], number_in(f, 0, 1e6, false));
  }
  return ok();
}

// The value is not shown: a key pasted here must not be printed.
Result<std::string> parse_key_env(const JsonField& f) {
  static const std::regex kName("[A-Za-z_][A-Za-z0-9_]*");
  if (!f.value().is_string() || !std::regex_match(f.value().get<std::string>(), kName)) {
    return invalid_input(fmt::format(
        "{}: field \"{}\": expected the NAME of an environment variable ([A-Za-z_][A-Za-z0-9_]*) "
        "that holds the API key, never the key itself (the value is not shown)",
        f.source(), f.path()));
  }
  return f.value().get<std::string>();
}

}  // namespace

std::vector<std::string> option_keys() {
  return {"base_url",   "model",     "api_key_env", "temperature",
          "max_tokens", "timeout_s", "max_retries", "price", "target"};
}

Result<Json> parse_options(const JsonField& agent) {
  Json o = Json::object();
  ATREX_ASSIGN_OR_RETURN(auto url, agent.at("base_url"));
  ATREX_ASSIGN_OR_RETURN(std::string base_url, url.as_string());
  if (auto parsed = http::parse_url(base_url); !parsed) {
    return url.fail(parsed.error().message);
  } else if (parsed->target.find('?') != std::string::npos) {
    return url.fail("expected a base URL without a query (the key goes in api_key_env)");
  }
  while (!base_url.empty() && base_url.back() == '/') base_url.pop_back();
  o["base_url"] = base_url;
  ATREX_ASSIGN_OR_RETURN(auto model, agent.at("model"));
  ATREX_ASSIGN_OR_RETURN(o["model"], model.as_string());
  if (o["model"].get<std::string>().empty()) return model.fail("expected a model name");
  if (agent.has("api_key_env")) {
    ATREX_ASSIGN_OR_RETURN(auto k, agent.at("api_key_env"));
    ATREX_ASSIGN_OR_RETURN(o["api_key_env"], parse_key_env(k));
  }
  if (agent.has("temperature")) {
    ATREX_ASSIGN_OR_RETURN(auto t, agent.at("temperature"));
    ATREX_ASSIGN_OR_RETURN(o["temperature"], number_in(t, 0, 2, false));
  }
  if (agent.has("max_tokens")) {
    ATREX_ASSIGN_OR_RETURN(auto t, agent.at("max_tokens"));
    ATREX_ASSIGN_OR_RETURN(o["max_tokens"], int_in(t, 1, 10'000'000));
  }
  if (agent.has("timeout_s")) {
    ATREX_ASSIGN_OR_RETURN(auto t, agent.at("timeout_s"));
    ATREX_ASSIGN_OR_RETURN(o["timeout_s"], number_in(t, 0, 86400, true));
  }
  if (agent.has("max_retries")) {
    ATREX_ASSIGN_OR_RETURN(auto t, agent.at("max_retries"));
    ATREX_ASSIGN_OR_RETURN(o["max_retries"], int_in(t, 0, 100));
  }
  if (agent.has("price")) {
    ATREX_ASSIGN_OR_RETURN(auto p, agent.at("price"));
    Json price = Json::object();
    ATREX_TRY(parse_price(p, price));
    o["price"] = price;
  }
  ATREX_TRY(parse_target_option(agent, o));
  return o;
}

Json to_json(const OpenAiOptions& o) {
  Json j{{"base_url", o.base_url},
         {"model", o.model},
         {"timeout_s", o.timeout_s},
         {"max_retries", o.max_retries},
         {"price",
          {{"prompt_per_mtok", o.prompt_usd_per_mtok},
           {"completion_per_mtok", o.completion_usd_per_mtok}}}};
  if (!o.api_key_env.empty()) j["api_key_env"] = o.api_key_env;
  if (o.temperature) j["temperature"] = *o.temperature;
  if (o.max_tokens) j["max_tokens"] = *o.max_tokens;
  if (o.target != "cuda") j["target"] = o.target;
  return j;
}

Result<OpenAiOptions> options_from_json(const Json& options, const std::string& source) {
  OpenAiOptions o;
  ATREX_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::open(JsonField(options, source)));
  ATREX_TRY(r.required("base_url", o.base_url));
  ATREX_TRY(r.required("model", o.model));
  ATREX_TRY(r.optional("api_key_env", o.api_key_env));
  ATREX_TRY(r.optional("temperature", o.temperature));
  ATREX_TRY(r.optional("max_tokens", o.max_tokens));
  ATREX_TRY(r.optional("timeout_s", o.timeout_s));
  ATREX_TRY(r.optional("max_retries", o.max_retries));
  Json price = Json::object();
  ATREX_TRY(r.optional("price", price));
  ATREX_TRY(r.optional("target", o.target));
  ATREX_TRY(r.finish());
  o.prompt_usd_per_mtok = price.value("prompt_per_mtok", 0.0);
  o.completion_usd_per_mtok = price.value("completion_per_mtok", 0.0);
  return o;
}

Result<std::string> api_key_from_env(const OpenAiOptions& o, const std::string& agent) {
  if (o.api_key_env.empty()) return std::string();
  const char* key = std::getenv(o.api_key_env.c_str());
  if (!key || !*key) {
    return invalid_input(fmt::format(
        "agent {}: the environment variable {} (its api_key_env) is not set or empty; export the "
        "model server's API key in it where the agent workers run",
        agent, o.api_key_env));
  }
  return std::string(key);
}

}  // namespace atrex::agent::openai
