#include "openai/chat_client.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "atrex/common/untrusted_json.h"

namespace atrex::agent::openai {

// The outcome of one HTTP exchange.
struct ChatClient::Attempt {
  std::optional<ChatReply> reply;
  Error error;  // when !reply
  bool retry = false;
  std::optional<std::chrono::milliseconds> retry_after;
};

namespace {

std::string excerpt(const std::string& s, size_t n = 300) {
  std::string e = s.substr(0, n);
  for (char& c : e) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return s.size() > n ? e + "..." : e;
}

// choices[0].message.content of a chat completion; usage when reported.
Result<ChatReply> read_completion(const Json& j, TokenUsage& tokens) {
  if (!j.is_object()) return make_error(ErrorCode::kUnavailable, "the reply is not a JSON object");
  if (auto u = j.find("usage"); u != j.end() && u->is_object()) {
    tokens.prompt_tokens = u->value("prompt_tokens", int64_t{0});
    tokens.completion_tokens = u->value("completion_tokens", int64_t{0});
  }
  const auto choices = j.find("choices");
  if (choices == j.end() || !choices->is_array() || choices->empty() ||
      !(*choices)[0].is_object()) {
    return make_error(ErrorCode::kUnavailable, "no choices in the reply");
  }
  const Json& c = (*choices)[0];
  ChatReply r;
  if (auto f = c.find("finish_reason"); f != c.end() && f->is_string()) r.finish_reason = *f;
  const auto m = c.find("message");
  if (m == c.end() || !m->is_object()) {
    return make_error(ErrorCode::kUnavailable, "choices[0] has no message");
  }
  if (auto content = m->find("content"); content != m->end() && content->is_string()) {
    r.content = *content;
  }
  return r;
}

}  // namespace

double cost_usd(const OpenAiOptions& o, int64_t prompt_tokens, int64_t completion_tokens) {
  return (static_cast<double>(prompt_tokens) * o.prompt_usd_per_mtok +
          static_cast<double>(completion_tokens) * o.completion_usd_per_mtok) /
         1e6;
}

ChatClient::ChatClient(OpenAiOptions options, std::string api_key, http::Client http,
                       RetryDeps deps)
    : options_(std::move(options)),
      api_key_(std::move(api_key)),
      http_(std::move(http)),
      deps_(std::move(deps)) {
  policy_.max_retries = options_.max_retries;
}

std::string ChatClient::redact(std::string text) const {
  if (api_key_.empty()) return text;
  for (size_t at; (at = text.find(api_key_)) != std::string::npos;)
    text.replace(at, api_key_.size(), "***");
  return text;
}

ChatClient::Attempt ChatClient::send_once(const std::string& body, TokenUsage& spent) const {
  http::Request req;
  req.method = "POST";
  req.url = options_.base_url + "/chat/completions";
  req.headers = {{"Content-Type", "application/json"}, {"Accept", "application/json"}};
  if (!api_key_.empty()) req.headers.push_back({"Authorization", "Bearer " + api_key_});
  req.body = body;
  req.timeout = std::chrono::milliseconds(static_cast<int64_t>(options_.timeout_s * 1000));
  ++spent.requests;
  Attempt a;
  auto res = http_.send(req);
  if (!res) {
    a.error = Error{res.error().code == ErrorCode::kInvalidInput ? ErrorCode::kInvalidInput
                                                                 : ErrorCode::kUnavailable,
                    redact(res.error().message)};
    a.retry = res.error().code != ErrorCode::kInvalidInput;
    return a;
  }
  if (res->status != 200) {
    const std::string what =
        fmt::format("HTTP {} from {}: {}", res->status, req.url, redact(excerpt(res->body)));
    const bool config = res->status == 401 || res->status == 403 || res->status == 404;
    a.error = Error{config ? ErrorCode::kInvalidInput : ErrorCode::kUnavailable, what};
    a.retry = retryable_status(res->status);
    if (auto ra = res->header("Retry-After"))
      a.retry_after = parse_retry_after(*ra, deps_.wall_now());
    return a;
  }
  // The server's reply is parsed depth-bounded (untrusted_json.h): a reply nested hundreds of
  // thousands of levels deep would overflow the stack of the first recursive use of it.
  auto parsed = parse_untrusted_json(res->body, kAgentJsonDepth);
  if (!parsed) {
    a.error = Error{ErrorCode::kUnavailable,
                    fmt::format("malformed JSON in the reply ({}): {}", parsed.error().message,
                                redact(excerpt(res->body, 200)))};
    a.retry = true;
    return a;
  }
  Json j = std::move(*parsed);
  TokenUsage tokens;
  auto reply = read_completion(j, tokens);
  spent.prompt_tokens += tokens.prompt_tokens;
  spent.completion_tokens += tokens.completion_tokens;
  spent.cost_usd += cost_usd(options_, tokens.prompt_tokens, tokens.completion_tokens);
  if (!reply) {
    a.error = Error{ErrorCode::kUnavailable,
                    reply.error().message + ": " + redact(excerpt(res->body, 200))};
    a.retry = true;
    return a;
  }
  reply->content = redact(std::move(reply->content));
  a.reply = std::move(*reply);
  return a;
}

Result<ChatReply> ChatClient::complete(const Json& messages, TokenUsage& spent) const {
  Json body{{"model", options_.model}, {"messages", messages}, {"stream", false}};
  if (options_.temperature) body["temperature"] = *options_.temperature;
  if (options_.max_tokens) body["max_tokens"] = *options_.max_tokens;
  const std::string text = body.dump();
  for (int attempt = 0;; ++attempt) {
    Attempt a = send_once(text, spent);
    if (a.reply) return std::move(*a.reply);
    if (a.error.code == ErrorCode::kInvalidInput) return tl::unexpected(a.error);
    if (!a.retry || attempt >= policy_.max_retries) {
      return make_error(ErrorCode::kUnavailable,
                        fmt::format("model server {}: {} (after {} attempt{})", options_.base_url,
                                    a.error.message, attempt + 1, attempt ? "s" : ""));
    }
    const auto wait = retry_delay(policy_, attempt, deps_.uniform01(), a.retry_after);
    spdlog::warn("model server {}: {}; retry {} of {} in {} ms", options_.base_url, a.error.message,
                 attempt + 1, policy_.max_retries, wait.count());
    deps_.sleep(wait);
  }
}

}  // namespace atrex::agent::openai
