// The `openai` provider's sweep-file fields (docs/agents.md "The openai provider"):
//   base_url: http://127.0.0.1:8000/v1   (POST {base_url}/chat/completions)
//   model: Qwen/Qwen3-Coder-30B-A3B-Instruct
//   api_key_env: VLLM_API_KEY            (the NAME of the variable holding the key; optional)
//   temperature: 0.2                     (optional, [0, 2]; absent: the server's default)
//   max_tokens: 8192                     (optional; absent: the server's default)
//   timeout_s: 600                       (one request; default 600)
//   max_retries: 4                       (retries of one request; default 4)
//   price: {prompt_per_mtok: 0.3, completion_per_mtok: 1.2}   (USD per million tokens; 0)
// Parsing is strict: an unknown key, a wrong type or an out-of-range value is an error naming
// the sweep file, the field and the value — except api_key_env, whose value is never echoed (a
// pasted key must not reach a terminal or a log).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "atrex/common/error.h"
#include "atrex/common/json_io.h"

namespace atrex::agent::openai {

struct OpenAiOptions {
  std::string base_url;
  std::string model;
  std::string api_key_env;  // "" = no Authorization header (a local server without keys)
  std::optional<double> temperature;
  std::optional<int64_t> max_tokens;
  double timeout_s = 600;
  int max_retries = 4;
  double prompt_usd_per_mtok = 0;
  double completion_usd_per_mtok = 0;
  std::string target = "cuda";  // what the model writes (target.h): cuda, triton or torch
};

// The sweep-file keys of an openai agent entry.
std::vector<std::string> option_keys();

// Validates an agent entry's openai keys into the normalised options object kept in
// AgentSpec::options (errors kInvalidInput: file, field, value).
Result<Json> parse_options(const JsonField& agent);

// Reads back what parse_options produced (manifests and agent tasks carry it).
Result<OpenAiOptions> options_from_json(const Json& options, const std::string& source);
Json to_json(const OpenAiOptions& o);

// The key from the environment: kInvalidInput naming the variable (never its value) when
// api_key_env is set but the variable is unset or empty; "" when api_key_env is empty.
Result<std::string> api_key_from_env(const OpenAiOptions& o, const std::string& agent);

}  // namespace atrex::agent::openai
