// When and how long the chat client waits before sending a request again (anchors-agents.md
// §3: 429s honour Retry-After, else exponential backoff with jitter and a retry cap).
//
// Retried: 429 and 408 (Retry-After honoured when given), 5xx (Retry-After honoured, 503
// sends it), connection errors and timeouts, and 200 replies that are not a chat completion
// (malformed JSON, no choices): a proxy or an overloaded server. Not retried: every other 4xx.
// The waits come from RetryDeps, so unit tests never sleep.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string_view>

#include "atrex/agent/openai_provider.h"

namespace atrex::agent::openai {

struct RetryPolicy {
  int max_retries = 4;                                 // retries after the first attempt
  std::chrono::milliseconds base{1000};                // first backoff (before jitter)
  std::chrono::milliseconds cap{60'000};               // longest backoff
  std::chrono::milliseconds retry_after_cap{300'000};  // longest Retry-After honoured
};

// The real sleep, randomness and wall clock, for the members `deps` leaves empty.
RetryDeps with_real_defaults(RetryDeps deps);

// Retry-After (RFC 9110 §10.2.3): delay-seconds ("120") or an HTTP-date (IMF-fixdate
// "Sun, 06 Nov 1994 08:49:37 GMT", RFC 9110 §5.6.7; a date in the past is 0). nullopt when
// the value is neither. Pure.
std::optional<std::chrono::milliseconds> parse_retry_after(
    std::string_view value, std::chrono::system_clock::time_point now);

// The wait before retry number `retry` (0 = the first retry): "equal jitter" exponential
// backoff, d = min(cap, base * 2^retry), wait = d/2 + uniform01 * d/2 (never less than half the
// step, so a rate-limited server is not hit again at once). Pure.
std::chrono::milliseconds backoff_delay(const RetryPolicy& p, int retry, double uniform01);

// The wait before a retry when the server said Retry-After (capped at retry_after_cap), else
// the backoff.
std::chrono::milliseconds retry_delay(const RetryPolicy& p, int retry, double uniform01,
                                      std::optional<std::chrono::milliseconds> retry_after);

// Whether an HTTP status is worth sending again (429, 408, 5xx).
bool retryable_status(int status);

}  // namespace atrex::agent::openai
