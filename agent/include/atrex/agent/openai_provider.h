// The `openai` provider (DESIGN.md §7, docs/agents.md): any OpenAI-compatible chat-completions
// server (POST {base_url}/chat/completions). One generation is one conversation: the problem,
// then per iteration the model's reply (the candidate is its fenced code block) and the
// feedback on that candidate. Requests retry on 429 (honouring Retry-After), 5xx, connection
// errors and timeouts, with exponential backoff and jitter, a bounded number of times; the
// usage the server reports becomes tokens and cost (the agent's price) per iteration.
//
// What an iteration becomes:
//  - a reply with a candidate: evaluated as usual;
//  - a reply without one (no code block, cut at max_tokens): an iteration without a candidate
//    (Proposal::failure), fed back to the model in the next message;
//  - a server that keeps failing past the retries (5xx, timeouts, malformed JSON, no choices)
//    or refuses the request (4xx other than 401/403/404/408/429): an iteration without a
//    candidate; the same conversation is sent again next iteration;
//  - 401, 403 or 404 (a wrong key, model or URL): kInvalidInput, which ends the (agent,
//    operator) with that error (retrying cannot help).
// The API key is read from the environment variable api_key_env names when a provider is made,
// and goes only into the Authorization header.
#pragma once

#include <chrono>
#include <functional>
#include <memory>

#include "atrex/agent/provider_registry.h"

namespace atrex::agent {

namespace openai {
// The clock, the sleep and the randomness of the retries (empty members: the real ones), so
// tests neither sleep nor depend on chance.
struct RetryDeps {
  std::function<void(std::chrono::milliseconds)> sleep;
  std::function<double()> uniform01;                                // in [0, 1)
  std::function<std::chrono::system_clock::time_point()> wall_now;  // HTTP-date Retry-After
};
}  // namespace openai

// The registry entry ("openai"). Errors: the embedded knowledge base does not parse.
Result<std::shared_ptr<ProviderFactory>> make_openai_provider_factory(openai::RetryDeps deps = {});

}  // namespace atrex::agent
