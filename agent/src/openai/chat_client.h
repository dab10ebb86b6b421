// One chat completion from an OpenAI-compatible server (POST {base_url}/chat/completions:
// OpenAI, vLLM, SGLang, OpenRouter, a gateway), non-streaming, with the retries of retry.h.
//
// The request: {"model", "messages", "stream": false, "temperature"?, "max_tokens"?} with
// "Authorization: Bearer <key>" when the agent has api_key_env. The reply's choices[0].message
// .content, finish_reason and usage.{prompt_tokens, completion_tokens} are read; anything else
// is ignored. The key is never part of an error, and every text that came from the server is
// returned with the key replaced by "***" (a server or a proxy may echo it).
#pragma once

#include <string>

#include "atrex/common/error.h"
#include "atrex/common/http/client.h"
#include "atrex/common/json_io.h"
#include "atrex/common/wire/agent_task.h"
#include "openai/options.h"
#include "openai/retry.h"

namespace atrex::agent::openai {

struct ChatReply {
  std::string content;        // the assistant message; "" when the server sent none
  std::string finish_reason;  // "stop", "length", ...; "" when absent
};

class ChatClient {
 public:
  ChatClient(OpenAiOptions options, std::string api_key, http::Client http, RetryDeps deps);

  // Sends `messages` (the conversation, an array of {role, content}) until a chat completion
  // arrives or the retries are spent. `spent` gains every request sent and the tokens and cost of
  // every reply that reported usage, also when the call fails in the end.
  // Errors:
  //  - kInvalidInput: the server refused the configuration (401, 403, 404: a wrong key, model or
  //    base_url; retrying or going on cannot help);
  //  - kUnavailable: the last attempt's failure after the retries ("HTTP 503 ...", "timed out
  //    ...", "malformed JSON ...", "no choices ...") or a 4xx that is not worth retrying (400,
  //    413, 422 ...), with the attempts made.
  Result<ChatReply> complete(const Json& messages, TokenUsage& spent) const;

  const OpenAiOptions& options() const { return options_; }

 private:
  struct Attempt;
  Attempt send_once(const std::string& body, TokenUsage& spent) const;
  std::string redact(std::string text) const;

  OpenAiOptions options_;
  std::string api_key_;
  http::Client http_;
  RetryDeps deps_;
  RetryPolicy policy_;
};

// Tokens x the agent's price (USD per million tokens).
double cost_usd(const OpenAiOptions& o, int64_t prompt_tokens, int64_t completion_tokens);

}  // namespace atrex::agent::openai
