// A fake OpenAI-compatible model server for tests (STYLE.md: fakes only at process edges): a real
// loopback HTTP server (http_server.h) that answers POST /v1/chat/completions with scripted
// replies, one per request in order — a completion (content, finish_reason, usage), an error
// status with headers (429 + Retry-After, 500), a body that is not JSON, a reply that never
// comes — and records every request it got (headers and the parsed chat request), so tests can
// check the conversation, the feedback and the Authorization header.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "atrex/common/json_io.h"
#include "atrex/testing/http_server.h"

namespace atrex::testing {

struct ScriptedReply {
  Reply reply;

  // 200 with a chat completion whose only choice holds `content`.
  static ScriptedReply completion(const std::string& content, int64_t prompt_tokens = 1000,
                                  int64_t completion_tokens = 200,
                                  const std::string& finish_reason = "stop") {
    Json j{{"id", "chatcmpl-fake"},
           {"object", "chat.completion"},
           {"created", 0},
           {"model", "fake-model"},
           {"choices", Json::array({Json{{"index", 0},
                                         {"message", {{"role", "assistant"}, {"content", content}}},
                                         {"finish_reason", finish_reason}}})},
           {"usage",
            {{"prompt_tokens", prompt_tokens},
             {"completion_tokens", completion_tokens},
             {"total_tokens", prompt_tokens + completion_tokens}}}};
    return body(j.dump());
  }
  // 200 with exactly `text` as the body (malformed JSON, no choices ...).
  static ScriptedReply body(std::string text) {
    ScriptedReply r;
    r.reply.status = 200;
    r.reply.headers = {{"Content-Type", "application/json"}};
    r.reply.body = std::move(text);
    return r;
  }
  // An error status, e.g. status(429, {{"Retry-After", "7"}}).
  static ScriptedReply status(int code, http::Headers headers = {}, std::string text = "") {
    ScriptedReply r;
    r.reply.status = code;
    r.reply.headers = std::move(headers);
    r.reply.body = text.empty() ? Json{{"error", {{"message", "scripted error"}}}}.dump() : text;
    return r;
  }
  // Reads the request and never answers (the connection stays open).
  static ScriptedReply hang() {
    ScriptedReply r;
    r.reply.hang = true;
    return r;
  }
};

class FakeLlmServer {
 public:
  FakeLlmServer() {
    server_.set_handler([this](const SeenRequest& req) { return answer(req); });
  }
  bool ok() const { return server_.ok(); }
  // The base_url of an agent entry: http://127.0.0.1:<port>/v1
  std::string base_url() const { return server_.url("/v1"); }

  // Replies for the next requests, in order (appended to what is left).
  void script(std::vector<ScriptedReply> replies) {
    std::lock_guard lock(mu_);
    for (auto& r : replies) script_.push_back(std::move(r));
  }
  // What requests past the script get (default: 500 "script exhausted").
  void set_fallback(ScriptedReply r) {
    std::lock_guard lock(mu_);
    fallback_ = std::move(r);
  }
  // Every request read (any path), in order.
  std::vector<SeenRequest> requests() const { return server_.requests(); }
  // The chat-completions requests' bodies, parsed (null for a body that is not JSON).
  std::vector<Json> chat_requests() const {
    std::vector<Json> out;
    for (const auto& r : server_.requests()) {
      if (r.target != "/v1/chat/completions") continue;
      out.push_back(Json::parse(r.body, nullptr, false));
      if (out.back().is_discarded()) out.back() = nullptr;
    }
    return out;
  }
  bool wait_for_requests(size_t n, std::chrono::milliseconds within) {
    return server_.wait_for_requests(n, within);
  }

 private:
  Reply answer(const SeenRequest& req) {
    if (req.method != "POST" || req.target != "/v1/chat/completions") {
      return ScriptedReply::status(404, {}, R"({"error":{"message":"no such route"}})").reply;
    }
    std::lock_guard lock(mu_);
    if (script_.empty()) return fallback_.reply;
    Reply r = std::move(script_.front().reply);
    script_.pop_front();
    return r;
  }

  std::mutex mu_;
  std::deque<ScriptedReply> script_;
  ScriptedReply fallback_ =
      ScriptedReply::status(500, {}, R"({"error":{"message":"script exhausted"}})");
  HttpServer server_;  // last: stopped (its thread joined) before the script it reads goes
};

}  // namespace atrex::testing
